package gemm

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"
)

// Constant operands. A caller that multiplies by the same immutable matrix
// many times (the weights of a model) registers its storage once; Sgemm then
// packs op(B) of such a matrix a single time and reuses the panels, as
// onnxruntime does with its pre-packed weights. Registration is a promise
// that the values do not change until the release function is called.

type packKey struct {
	ptr       uintptr
	k, n, ldb int
	trans     bool
	nr        int
}

// packedB holds op(B) packed for every depth block: block q (rows
// [q·kc, q·kc+kb)) is stored at off[q] as ⌈n/nr⌉ panels of kb×nr values.
type packedB struct {
	once sync.Once
	data []float32
	off  []int
}

// panel returns the kb×nr panel of depth block q that starts at column j
// (a multiple of nr).
func (p *packedB) panels(q, kb, j int) []float32 {
	return p.data[p.off[q]+j*kb:]
}

type constEntry struct {
	base, end uintptr   // byte range of the registered storage
	keep      []float32 // holds the storage so its addresses are not reused
	packs     map[packKey]*packedB
}

var (
	constMu sync.RWMutex
	consts  []*constEntry // sorted by base; overlapping registrations only risk a miss (packing per call)
)

// RegisterConstant declares that b will not change until release is
// called, so that Sgemm may keep b packed between calls when b is its B
// operand. Release drops the packed copies; it may be called more than
// once.
func RegisterConstant(b []float32) (release func()) {
	if len(b) == 0 {
		return func() {}
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	e := &constEntry{base: base, end: base + uintptr(len(b))*4, keep: b, packs: map[packKey]*packedB{}}
	constMu.Lock()
	i, _ := slices.BinarySearchFunc(consts, base, func(c *constEntry, b uintptr) int { return cmp.Compare(c.base, b) })
	consts = slices.Insert(consts, i, e)
	constMu.Unlock()
	return func() {
		constMu.Lock()
		if i := slices.Index(consts, e); i >= 0 {
			consts = slices.Delete(consts, i, i+1)
		}
		constMu.Unlock()
	}
}

// constantPack returns the packed form of op(B) when b lies in registered
// constant storage, packing it on first use; otherwise nil.
func constantPack(B matrix, k, n int) *packedB {
	if len(B.d) == 0 {
		return nil
	}
	ptr := uintptr(unsafe.Pointer(unsafe.SliceData(B.d)))
	constMu.RLock()
	if len(consts) == 0 {
		constMu.RUnlock()
		return nil
	}
	// The last entry starting at or before ptr is the only candidate.
	var owner *constEntry
	i, found := slices.BinarySearchFunc(consts, ptr, func(c *constEntry, p uintptr) int { return cmp.Compare(c.base, p) })
	if !found {
		i--
	}
	if i >= 0 && ptr < consts[i].end {
		owner = consts[i]
	}
	constMu.RUnlock()
	if owner == nil {
		return nil
	}
	key := packKey{ptr: ptr, k: k, n: n, ldb: B.ld, trans: B.trans, nr: impl.nr}
	constMu.Lock()
	p := owner.packs[key]
	if p == nil {
		p = &packedB{}
		owner.packs[key] = p
	}
	constMu.Unlock()
	p.once.Do(func() {
		nr := impl.nr
		np := (n + nr - 1) / nr * nr
		p.data = make([]float32, np*k)
		for pc, q := 0, 0; pc < k; pc, q = pc+kc, q+1 {
			kb := min(kc, k-pc)
			p.off = append(p.off, pc*np)
			packB(p.data[pc*np:pc*np+np*kb], B, pc, 0, kb, n, nr)
		}
	})
	return p
}
