package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
)

// The driver speaks Python's marshal format (version 2, which has no back-references) because
// marshal is built into the interpreter: importing json would cost a bare container a third of
// its start-up. Only the subset below is understood; anything else is a protocol error.
//
// Decoded values are nil, bool, int64, float64, string, []byte, []any (lists and tuples) and
// map[string]any (dicts with string keys).

const (
	marshalMaxDepth = 16
	// marshalMaxValues bounds the values one frame decodes to. The frame limit bounds its
	// bytes, but a byte may decode to 16 or more (a None in a list; an empty dict is more), and
	// code that takes over the driver's process can write frames of its own. The driver's
	// largest answer holds maxFiles files of three values each, maxImages images and a dozen
	// more values.
	marshalMaxValues = 3*maxFiles + maxImages + 1024
)

var errMarshal = errors.New("malformed driver frame")

// marshalEncode encodes v, which must be built from the decoded types above (ints may be int
// or int64; dict keys are emitted in sorted order).
func marshalEncode(v any) ([]byte, error) {
	var b []byte
	return marshalAppend(b, v)
}

func marshalAppend(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, 'N'), nil
	case bool:
		if x {
			return append(b, 'T'), nil
		}
		return append(b, 'F'), nil
	case int:
		return marshalAppendInt(b, int64(x)), nil
	case int64:
		return marshalAppendInt(b, x), nil
	case float64:
		b = append(b, 'g')
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(x)), nil
	case string:
		if len(x) > math.MaxInt32 {
			return nil, fmt.Errorf("encode string: %d bytes is too long", len(x))
		}
		b = append(b, 'u')
		b = binary.LittleEndian.AppendUint32(b, uint32(len(x)))
		return append(b, x...), nil
	case []byte:
		if len(x) > math.MaxInt32 {
			return nil, fmt.Errorf("encode bytes: %d bytes is too long", len(x))
		}
		b = append(b, 's')
		b = binary.LittleEndian.AppendUint32(b, uint32(len(x)))
		return append(b, x...), nil
	case []any:
		b = append(b, '[')
		b = binary.LittleEndian.AppendUint32(b, uint32(len(x)))
		var err error
		for _, e := range x {
			if b, err = marshalAppend(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		var err error
		for _, k := range keys {
			if b, err = marshalAppend(b, k); err != nil {
				return nil, err
			}
			if b, err = marshalAppend(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '0'), nil
	default:
		return nil, fmt.Errorf("encode %T: unsupported type", v)
	}
}

func marshalAppendInt(b []byte, x int64) []byte {
	if x >= math.MinInt32 && x <= math.MaxInt32 {
		b = append(b, 'i')
		return binary.LittleEndian.AppendUint32(b, uint32(int32(x)))
	}
	// TYPE_LONG: signed count of 15-bit digits, least significant first.
	neg := x < 0
	u := uint64(x)
	if neg {
		u = -u
	}
	var digits []uint16
	for u > 0 {
		digits = append(digits, uint16(u&0x7fff))
		u >>= 15
	}
	n := int32(len(digits))
	if neg {
		n = -n
	}
	b = append(b, 'l')
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	for _, d := range digits {
		b = binary.LittleEndian.AppendUint16(b, d)
	}
	return b
}

// marshalDecode decodes one value that must span all of data.
func marshalDecode(data []byte) (any, error) {
	d := marshalDecoder{data: data, values: marshalMaxValues}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if d.pos != len(d.data) {
		return nil, fmt.Errorf("%w: %d trailing bytes", errMarshal, len(d.data)-d.pos)
	}
	return v, nil
}

type marshalDecoder struct {
	data   []byte
	pos    int
	values int // how many more values may be decoded
}

func (d *marshalDecoder) take(n int) ([]byte, error) {
	if n < 0 || n > len(d.data)-d.pos {
		return nil, fmt.Errorf("%w: length %d past the end", errMarshal, n)
	}
	b := d.data[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

func (d *marshalDecoder) int32() (int32, error) {
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return int32(binary.LittleEndian.Uint32(b)), nil
}

func (d *marshalDecoder) value(depth int) (any, error) {
	if depth > marshalMaxDepth {
		return nil, fmt.Errorf("%w: nested too deeply", errMarshal)
	}
	if d.values <= 0 {
		return nil, fmt.Errorf("%w: more than %d values", errMarshal, marshalMaxValues)
	}
	d.values--
	tb, err := d.take(1)
	if err != nil {
		return nil, err
	}
	switch tb[0] {
	case 'N':
		return nil, nil
	case 'T':
		return true, nil
	case 'F':
		return false, nil
	case 'i':
		n, err := d.int32()
		return int64(n), err
	case 'l':
		return d.long()
	case 'g':
		b, err := d.take(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	case 's', 'u':
		n, err := d.int32()
		if err != nil {
			return nil, err
		}
		b, err := d.take(int(n))
		if err != nil {
			return nil, err
		}
		if tb[0] == 'u' {
			return string(b), nil
		}
		return b, nil
	case '[', '(':
		n, err := d.int32()
		if err != nil {
			return nil, err
		}
		// Every element takes at least one byte and one value: a count beyond the rest of
		// either is malformed, and the list is never sized beyond them.
		if n < 0 || int(n) > len(d.data)-d.pos {
			return nil, fmt.Errorf("%w: list of %d elements past the end", errMarshal, n)
		}
		if int(n) > d.values {
			return nil, fmt.Errorf("%w: more than %d values", errMarshal, marshalMaxValues)
		}
		list := make([]any, 0, n)
		for range n {
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case '{':
		m := map[string]any{}
		for {
			if d.pos < len(d.data) && d.data[d.pos] == '0' {
				d.pos++
				return m, nil
			}
			k, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%w: dict key of type %T", errMarshal, k)
			}
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[ks] = v
		}
	default:
		return nil, fmt.Errorf("%w: type byte %q", errMarshal, tb[0])
	}
}

func (d *marshalDecoder) long() (any, error) {
	n, err := d.int32()
	if err != nil {
		return nil, err
	}
	neg := n < 0
	if neg {
		n = -n
	}
	if n > 5 { // 5 digits of 15 bits hold 75 bits; int64 needs at most 5
		return nil, fmt.Errorf("%w: integer of %d digits", errMarshal, n)
	}
	var u uint64
	for i := range n {
		b, err := d.take(2)
		if err != nil {
			return nil, err
		}
		dig := uint64(binary.LittleEndian.Uint16(b))
		if dig > 0x7fff {
			return nil, fmt.Errorf("%w: bad integer digit", errMarshal)
		}
		if i == 4 && dig > 0xf { // bits past 64
			return nil, fmt.Errorf("%w: integer overflows int64", errMarshal)
		}
		u |= dig << (15 * uint(i))
	}
	if neg {
		if u > 1<<63 {
			return nil, fmt.Errorf("%w: integer overflows int64", errMarshal)
		}
		return -int64(u), nil
	}
	if u > math.MaxInt64 {
		return nil, fmt.Errorf("%w: integer overflows int64", errMarshal)
	}
	return int64(u), nil
}
