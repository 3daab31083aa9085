package onnx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

var npyTypes = map[string]DataType{
	"f4": Float, "f8": Double, "f2": Float16, "i1": Int8, "u1": Uint8,
	"i2": Int16, "u2": Uint16, "i4": Int32, "u4": Uint32, "i8": Int64,
	"u8": Uint64, "b1": Bool,
}

var npyHeader = regexp.MustCompile(`'descr'\s*:\s*'([<>|=])([a-z][0-9]+)'\s*,\s*'fortran_order'\s*:\s*(True|False)\s*,\s*'shape'\s*:\s*\(([0-9,\s]*)\)`)

// ReadNPY reads a tensor from a NumPy .npy file (format 1.0–3.0,
// little-endian or single-byte types, C order).
func ReadNPY(path string) (*Tensor, error) {
	data, err := fsutil.ReadFile(path, MaxModelBytes) // a pipe or /dev/zero is read to the bound, no further
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	t, err := DecodeNPY(data)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	return t, nil
}

// DecodeNPY parses the bytes of a .npy file.
func DecodeNPY(data []byte) (*Tensor, error) {
	if len(data) < 10 || !bytes.Equal(data[:6], []byte("\x93NUMPY")) {
		return nil, fmt.Errorf("not a .npy file")
	}
	var hlen, start int
	switch data[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(data[8:10])), 10
	case 2, 3:
		if len(data) < 12 {
			return nil, fmt.Errorf("truncated .npy header")
		}
		hlen, start = int(binary.LittleEndian.Uint32(data[8:12])), 12
	default:
		return nil, fmt.Errorf(".npy format version %d is not supported", data[6])
	}
	if hlen < 0 || start+hlen > len(data) {
		return nil, fmt.Errorf("truncated .npy header")
	}
	header := string(data[start : start+hlen])
	m := npyHeader.FindStringSubmatch(header)
	if m == nil {
		return nil, fmt.Errorf("unsupported .npy header %q", strings.TrimSpace(header))
	}
	dt, ok := npyTypes[m[2]]
	if !ok {
		return nil, fmt.Errorf(".npy dtype %q is not supported", m[2])
	}
	if m[1] == ">" && ElemSize(dt) > 1 {
		return nil, fmt.Errorf("big-endian .npy data is not supported")
	}
	if m[3] == "True" {
		return nil, fmt.Errorf("column-major (Fortran-order) .npy data is not supported")
	}
	var shape []int
	for _, s := range strings.Split(m[4], ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		d, err := strconv.Atoi(s)
		if err != nil || d < 0 || d > MaxTensorElements {
			return nil, fmt.Errorf("bad .npy shape %q", m[4])
		}
		shape = append(shape, d)
	}
	shape = append([]int{}, shape...)
	n := NumElements(shape)
	if n < 0 || n > MaxTensorElements {
		return nil, fmt.Errorf(".npy shape %v is too large", shape)
	}
	body := data[start+hlen:]
	if len(body) != n*ElemSize(dt) {
		return nil, fmt.Errorf(".npy data has %d bytes, shape %v of %s needs %d", len(body), shape, TypeName(dt), n*ElemSize(dt))
	}
	return &Tensor{DType: dt, Shape: shape, Data: decodeRaw(dt, body, n)}, nil
}

// WriteNPY writes t as a .npy file (format 1.0), atomically.
func WriteNPY(path string, t *Tensor) error {
	var buf bytes.Buffer
	if err := EncodeNPY(&buf, t); err != nil {
		return fmt.Errorf("onnx: %s: %w", path, err)
	}
	return writeFileAtomic(path, buf.Bytes())
}

// EncodeNPY writes the .npy encoding of t to w: NPYHeader, then the
// data as EncodeRaw gives it.
func EncodeNPY(w io.Writer, t *Tensor) error {
	if err := t.Check(); err != nil {
		return err
	}
	head, err := NPYHeader(t.DType, t.Shape)
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	_, err = w.Write(EncodeRaw(t))
	return err
}

// NPYHeader is the header of a .npy file holding a C-order tensor of type
// dt and the given shape, little-endian: format 1.0, padded to a multiple
// of 64 bytes. The data follows it as EncodeRaw writes it.
func NPYHeader(dt DataType, shape []int) ([]byte, error) {
	descr := ""
	for k, v := range npyTypes {
		if v == dt {
			descr = k
		}
	}
	if descr == "" {
		return nil, fmt.Errorf("type %s cannot be written to .npy", TypeName(dt))
	}
	order := "<"
	if ElemSize(dt) == 1 {
		order = "|"
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	shapeText := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shapeText += ","
	}
	h := fmt.Sprintf("{'descr': '%s%s', 'fortran_order': False, 'shape': (%s), }", order, descr, shapeText)
	pad := 64 - (10+len(h)+1)%64
	if pad == 64 {
		pad = 0
	}
	h += strings.Repeat(" ", pad) + "\n"
	head := []byte("\x93NUMPY\x01\x00")
	head = binary.LittleEndian.AppendUint16(head, uint16(len(h)))
	return append(head, h...), nil
}

// ReadTensorFile reads a tensor from a .npy file or a serialized
// TensorProto (.pb, the ONNX test-data format), chosen by content.
func ReadTensorFile(path string) (*Tensor, error) {
	data, err := fsutil.ReadFile(path, MaxModelBytes) // a pipe or /dev/zero is read to the bound, no further
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if bytes.HasPrefix(data, []byte("\x93NUMPY")) {
		t, err := DecodeNPY(data)
		if err != nil {
			return nil, fmt.Errorf("onnx: %s: %w", path, err)
		}
		return t, nil
	}
	tp := &onnxpb.TensorProto{}
	if err := proto.Unmarshal(data, tp); err != nil {
		return nil, fmt.Errorf("onnx: %s: neither a .npy file nor a TensorProto: %v", path, err)
	}
	t, err := DecodeTensor(tp)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	return t, nil
}

// ReadTensorProtoFile reads a serialized TensorProto and also returns its
// name (the ONNX test-data files name the input they feed).
func ReadTensorProtoFile(path string) (string, *Tensor, error) {
	data, err := fsutil.ReadFile(path, MaxModelBytes) // a pipe or /dev/zero is read to the bound, no further
	if err != nil {
		return "", nil, fmt.Errorf("onnx: %w", err)
	}
	tp := &onnxpb.TensorProto{}
	if err := proto.Unmarshal(data, tp); err != nil {
		return "", nil, fmt.Errorf("onnx: %s: not a TensorProto: %v", path, err)
	}
	t, err := DecodeTensor(tp)
	if err != nil {
		return "", nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	return tp.GetName(), t, nil
}

// WriteTensorProtoFile writes t as a serialized TensorProto named name,
// atomically.
func WriteTensorProtoFile(path, name string, t *Tensor) error {
	var buf bytes.Buffer
	if err := EncodeTensorProto(&buf, name, t); err != nil {
		return fmt.Errorf("onnx: %s: %w", path, err)
	}
	return writeFileAtomic(path, buf.Bytes())
}

// EncodeTensorProto writes t to w as a serialized TensorProto named name
// (deterministic: the same tensor gives the same bytes).
func EncodeTensorProto(w io.Writer, name string, t *Tensor) error {
	tp, err := EncodeTensor(name, t)
	if err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(tp)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
