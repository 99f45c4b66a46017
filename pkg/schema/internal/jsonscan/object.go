package jsonscan

// objectKept is how many members a Object keeps; tools have two to five.
const objectKept = 8

// Object holds the members of one object of a checked body, read in a single walk. Its zero
// value is ready for read.
type Object struct {
	B    []byte
	st   int
	n    int // members read; only the first objectKept are kept
	keys [objectKept]Span
	vals [objectKept]Span
}

// Read reads the members of the object starting at b[st] and returns the offset just past it.
func (o *Object) Read(b []byte, st int) int {
	o.B, o.st, o.n = b, st, 0
	i := SkipWS(b, st+1)
	for i < len(b) && b[i] == '"' {
		ke := StringEnd(b, i)
		vs := SkipWS(b, SkipWS(b, ke)+1)
		ve := ValueEnd(b, vs)
		if o.n < objectKept {
			o.keys[o.n], o.vals[o.n] = Span{i, ke}, Span{vs, ve}
		}
		o.n++
		if i = SkipWS(b, ve); i >= len(b) || b[i] != ',' {
			break
		}
		i = SkipWS(b, i+1)
	}
	return min(i+1, len(b)) // past the closing brace
}

// Field returns the span of the value of the member named key (the last one when the key
// repeats, as Field), or a zero span.
func (o *Object) Field(key string) Span {
	if o.n > objectKept {
		return Field(o.B, o.st, key)
	}
	for k := o.n - 1; k >= 0; k-- {
		if StringIs(o.B[o.keys[k].Start:o.keys[k].End], key) {
			return o.vals[k]
		}
	}
	return Span{}
}

// FieldRaw is field for a key given as a JSON string with its quotes.
func (o *Object) FieldRaw(rawKey []byte) Span {
	if o.n > objectKept {
		var sp Span
		EachMember(o.B, o.st, func(k []byte, vs, ve int) bool {
			if RawEqual(k, rawKey) {
				sp = Span{vs, ve}
			}
			return true
		})
		return sp
	}
	for k := o.n - 1; k >= 0; k-- {
		if RawEqual(o.B[o.keys[k].Start:o.keys[k].End], rawKey) {
			return o.vals[k]
		}
	}
	return Span{}
}
