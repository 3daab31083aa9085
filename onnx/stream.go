package onnx

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// A model's weights are almost all of its bytes, and they sit in one place
// on the wire: the initializer field (5) of the graph field (7) of
// ModelProto. Reading the whole file and unmarshalling it holds the file
// and the decoded model at once (2× the model); marshalling it whole holds
// the model and its encoding at once. The functions below stream those
// tensors one at a time instead, so Load and Save need the model plus one
// tensor. Everything else in the model goes through proto.Unmarshal and
// proto.Marshal as before.

const (
	modelGraphField       protowire.Number = 7 // ModelProto.graph
	graphInitializerField protowire.Number = 5 // GraphProto.initializer
)

// errNotStreamable marks wire data the streaming reader does not take
// apart (a repeated graph field, groups, lengths past the end). Load then
// decodes the file whole, which gives the canonical error if it is bad.
var errNotStreamable = errors.New("onnx: not streamable")

// countingReader reads through a bufio.Reader and counts bytes consumed.
type countingReader struct {
	r   *bufio.Reader
	pos int64
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.pos++
	}
	return b, err
}

func (c *countingReader) varint() (uint64, error) {
	v, err := binary.ReadUvarint(c)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return v, err
}

func (c *countingReader) full(buf []byte) error {
	n, err := io.ReadFull(c.r, buf)
	c.pos += int64(n)
	return err
}

// fits reports whether l more bytes lie between the reader's position and
// end. The position can already be past end when a field's tag or length
// ran over the end of its enclosing message; then nothing fits.
func (c *countingReader) fits(l uint64, end int64) bool {
	return c.pos <= end && l <= uint64(end-c.pos)
}

// decodeStream parses a serialized ModelProto of size bytes from r,
// unmarshalling the graph's initializers one at a time from a reused
// buffer. It returns errNotStreamable (or an I/O error) for anything it
// does not handle; the caller then decodes the file whole.
func decodeStream(r io.Reader, size int64) (*onnxpb.ModelProto, error) {
	d := &streamDecoder{cr: &countingReader{r: bufio.NewReaderSize(r, 1<<20)}}
	var top []byte
	sawGraph := false
	for d.cr.pos < size {
		tag, err := d.cr.varint()
		if err != nil {
			return nil, err
		}
		num, typ := protowire.DecodeTag(tag)
		if num != modelGraphField || typ != protowire.BytesType {
			if top, err = d.copyField(top, num, typ, size); err != nil {
				return nil, err
			}
			continue
		}
		if sawGraph { // a repeated message field merges: leave it to proto
			return nil, errNotStreamable
		}
		sawGraph = true
		if err := d.readGraph(size); err != nil {
			return nil, err
		}
	}
	if d.cr.pos != size {
		return nil, errNotStreamable
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(top, m); err != nil {
		return nil, errNotStreamable
	}
	if sawGraph {
		g := &onnxpb.GraphProto{}
		if err := proto.Unmarshal(d.graph, g); err != nil {
			return nil, errNotStreamable
		}
		g.Initializer = d.inits
		m.Graph = g
	}
	return m, nil
}

// streamDecoder holds what decodeStream has read of the graph: its fields
// other than the initializers (wire bytes), and the initializers decoded.
type streamDecoder struct {
	cr    *countingReader
	graph []byte
	inits []*onnxpb.TensorProto
	buf   []byte // reused for each initializer's bytes
}

// readGraph reads the graph field whose tag was just read (its length
// comes next), within the first size bytes of the stream.
func (d *streamDecoder) readGraph(size int64) error {
	cr := d.cr
	glen, err := cr.varint()
	if err != nil {
		return err
	}
	if !cr.fits(glen, size) {
		return errNotStreamable
	}
	end := cr.pos + int64(glen)
	for cr.pos < end {
		tag, err := cr.varint()
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num != graphInitializerField || typ != protowire.BytesType {
			if d.graph, err = d.copyField(d.graph, num, typ, end); err != nil {
				return err
			}
			continue
		}
		if err := d.readInitializer(end); err != nil {
			return err
		}
	}
	if cr.pos != end {
		return errNotStreamable
	}
	return nil
}

// readInitializer decodes the initializer whose tag was just read, which
// ends by end.
func (d *streamDecoder) readInitializer(end int64) error {
	l, err := d.cr.varint()
	if err != nil {
		return err
	}
	if !d.cr.fits(l, end) {
		return errNotStreamable
	}
	if uint64(cap(d.buf)) < l {
		d.buf = make([]byte, l)
	}
	d.buf = d.buf[:l]
	if err := d.cr.full(d.buf); err != nil {
		return err
	}
	t := &onnxpb.TensorProto{}
	if err := proto.Unmarshal(d.buf, t); err != nil {
		return errNotStreamable
	}
	d.inits = append(d.inits, t)
	return nil
}

// copyField appends the field whose tag (num, typ) was just read, and
// which ends by end, to dst.
func (d *streamDecoder) copyField(dst []byte, num protowire.Number, typ protowire.Type, end int64) ([]byte, error) {
	cr := d.cr
	dst = protowire.AppendTag(dst, num, typ)
	switch typ {
	case protowire.VarintType:
		v, err := cr.varint()
		if err != nil {
			return nil, err
		}
		return protowire.AppendVarint(dst, v), nil
	case protowire.Fixed32Type, protowire.Fixed64Type:
		n := 4
		if typ == protowire.Fixed64Type {
			n = 8
		}
		if !cr.fits(uint64(n), end) {
			return nil, errNotStreamable
		}
		var b [8]byte
		if err := cr.full(b[:n]); err != nil {
			return nil, err
		}
		return append(dst, b[:n]...), nil
	case protowire.BytesType:
		l, err := cr.varint()
		if err != nil {
			return nil, err
		}
		if !cr.fits(l, end) {
			return nil, errNotStreamable
		}
		dst = protowire.AppendVarint(dst, l)
		start := len(dst)
		dst = append(dst, make([]byte, l)...)
		return dst, cr.full(dst[start:])
	}
	return nil, errNotStreamable // groups, invalid wire types
}

// encodeStream writes m to w deterministically, marshalling the graph's
// initializers one at a time into a reused buffer. The bytes are a valid
// ModelProto; the graph field comes after the model's other fields and
// the initializers after the graph's other fields (protobuf readers accept
// fields in any order), and the same model always gives the same bytes.
func encodeStream(w io.Writer, m *onnxpb.ModelProto) error {
	opts := proto.MarshalOptions{Deterministic: true}
	top, err := opts.Marshal(without(m, modelGraphField))
	if err != nil {
		return fmt.Errorf("onnx: encoding model: %w", err)
	}
	if _, err := w.Write(top); err != nil {
		return err
	}
	g := m.GetGraph()
	if g == nil {
		return nil
	}
	rest, err := opts.Marshal(without(g, graphInitializerField))
	if err != nil {
		return fmt.Errorf("onnx: encoding graph: %w", err)
	}
	sizes := make([]int, len(g.Initializer))
	total, largest := len(rest), 0
	for i, t := range g.Initializer {
		sizes[i] = opts.Size(t)
		total += protowire.SizeTag(graphInitializerField) + protowire.SizeBytes(sizes[i])
		largest = max(largest, sizes[i])
	}
	hdr := protowire.AppendTag(nil, modelGraphField, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(total))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	if _, err := w.Write(rest); err != nil {
		return err
	}
	buf := make([]byte, 0, largest+16) // tag and length fit in 16 bytes
	for i, t := range g.Initializer {
		buf = protowire.AppendTag(buf[:0], graphInitializerField, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(sizes[i]))
		n := len(buf)
		if buf, err = opts.MarshalAppend(buf, t); err != nil {
			return fmt.Errorf("onnx: encoding initializer %q: %w", t.GetName(), err)
		}
		if len(buf)-n != sizes[i] {
			return fmt.Errorf("onnx: encoding initializer %q: %d bytes, sized %d", t.GetName(), len(buf)-n, sizes[i])
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// without returns a shallow copy of msg with field num cleared: the copy
// shares every other field's value with msg and is only for reading (here,
// marshalling).
func without(msg proto.Message, num protowire.Number) proto.Message {
	src := msg.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != num {
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return dst.Interface()
}

// CloneShared returns a deep copy of m whose bytes fields (tensors'
// raw_data above all) share their storage with m: the graph, its nodes,
// attributes and tensors are new messages the caller may change freely,
// but the bytes of a raw_data must be replaced, never written in place,
// by either side. It costs the model's structure, not its weights, which
// proto.Clone would copy.
func CloneShared(m *onnxpb.ModelProto) *onnxpb.ModelProto {
	if m == nil {
		return nil
	}
	return cloneShared(m.ProtoReflect()).Interface().(*onnxpb.ModelProto)
}

// copyFloats copies the float fields of src into dst (the same message
// type) bit for bit, and reports whether it knows src's type: ONNX's float
// fields are TensorProto.float_data and AttributeProto.f and floats.
func copyFloats(src, dst protoreflect.ProtoMessage) bool {
	switch s := src.(type) {
	case *onnxpb.TensorProto:
		dst.(*onnxpb.TensorProto).FloatData = append([]float32(nil), s.FloatData...)
	case *onnxpb.AttributeProto:
		d := dst.(*onnxpb.AttributeProto)
		if s.F != nil {
			f := *s.F
			d.F = &f
		}
		d.Floats = append([]float32(nil), s.Floats...)
	default:
		return false
	}
	return true
}

func cloneShared(src protoreflect.Message) protoreflect.Message {
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		// protoreflect holds a float as a float64, and converting a
		// signalling NaN makes it quiet: ONNX's floats are copied as Go
		// values, bit for bit.
		if fd.Kind() == protoreflect.FloatKind && copyFloats(src.Interface(), dst.Interface()) {
			return true
		}
		switch {
		case fd.IsList():
			sl, dl := v.List(), dst.Mutable(fd).List()
			for i := 0; i < sl.Len(); i++ {
				e := sl.Get(i)
				if fd.Message() != nil {
					e = protoreflect.ValueOfMessage(cloneShared(e.Message()))
				}
				dl.Append(e)
			}
		case fd.IsMap():
			sm, dm := v.Map(), dst.Mutable(fd).Map()
			sm.Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				if fd.MapValue().Message() != nil {
					e = protoreflect.ValueOfMessage(cloneShared(e.Message()))
				}
				dm.Set(k, e)
				return true
			})
		case fd.Message() != nil:
			dst.Set(fd, protoreflect.ValueOfMessage(cloneShared(v.Message())))
		default:
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(append(protoreflect.RawFields(nil), u...))
	}
	return dst
}
