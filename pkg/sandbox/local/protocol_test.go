package local

import (
	"bytes"
	"encoding/binary"
	"math"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestMarshalRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		give any
	}{
		{"none", nil},
		{"bools", []any{true, false}},
		{"small ints", []any{int64(0), int64(-1), int64(math.MaxInt32), int64(math.MinInt32)}},
		{"large ints", []any{int64(1 << 40), int64(-1 << 40), int64(math.MaxInt64), int64(math.MinInt64)}},
		{"float", 1.5},
		{"text", "héllo ✓"},
		{"bytes", []byte{0, 1, 0xff}},
		{"nested", map[string]any{"a": []any{int64(1), "b", map[string]any{"c": nil}}, "": []byte("x")}},
	}
	for _, tt := range tests {
		b, err := marshalEncode(tt.give)
		require.NoError(t, err, "%s: encode", tt.name)
		got, err := marshalDecode(b)
		require.NoError(t, err, "%s: decode", tt.name)
		assert.Equal(t, tt.give, got, "%s: round trip", tt.name)
	}
}

// TestMarshalMatchesPython checks the codec against the interpreter's own marshal module, both
// ways.
func TestMarshalMatchesPython(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	give := map[string]any{
		"op": "result", "seq": int64(7), "big": int64(1) << 50, "neg": int64(-3) << 40,
		"text": "é✓", "png": []byte("\x89PNG"), "files": []any{[]any{"/mnt/data/a", int64(3)}},
		"flag": true, "none": nil, "f": 0.25,
	}
	enc, err := marshalEncode(give)
	require.NoError(t, err, "encode")
	// Python decodes ours and encodes it back; both must be what we expect.
	cmd := exec.Command("/usr/bin/python3", "-c", `import marshal, sys
v = marshal.loads(sys.stdin.buffer.read())
assert v['text'] == 'é✓' and v['big'] == 1 << 50 and v['neg'] == -3 << 40, v
v['files'] = [tuple(f) for f in v['files']]
sys.stdout.buffer.write(marshal.dumps(v, 2))`)
	cmd.Stdin = bytes.NewReader(enc)
	out, err := cmd.Output()
	require.NoError(t, err, "python round trip")
	got, err := marshalDecode(out)
	require.NoError(t, err, "decode Python's encoding")
	assert.Equal(t, give, got, "Python's encoding decodes to the same value (tuples as lists)")
}

func TestMarshalDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"unknown type", []byte("?")},
		{"code object", []byte("c")},
		{"reference", []byte("r\x00\x00\x00\x00")},
		{"string past the end", []byte("u\x05\x00\x00\x00ab")},
		{"negative length", []byte("s\xff\xff\xff\xff")},
		{"list count past the end", []byte("[\xff\xff\xff\x7f")},
		{"unterminated dict", []byte("{u\x01\x00\x00\x00aN")},
		{"non-string key", []byte("{i\x01\x00\x00\x00N0")},
		{"trailing bytes", []byte("NN")},
		{"long overflow", []byte("l\x06\x00\x00\x00" + strings.Repeat("\xff\x7f", 6))},
		{"long bad digit", []byte("l\x01\x00\x00\x00\xff\xff")},
		{"too deep", bytes.Repeat([]byte("[\x01\x00\x00\x00"), 40)},
	}
	for _, tt := range tests {
		_, err := marshalDecode(tt.give)
		assert.ErrorIs(t, err, errMarshal, "%s: %q", tt.name, tt.give)
	}
	// The list itself is a value: it may hold one value fewer than a frame.
	_, err := marshalDecode(marshalList("N", marshalMaxValues-1))
	assert.NoError(t, err, "a list of as many values as a frame may hold")
	_, err = marshalDecode(marshalList("N", marshalMaxValues))
	assert.ErrorIs(t, err, errMarshal, "a list of more values than a frame may hold")
	_, err = marshalDecode(marshalList("[\x00\x00\x00\x00", marshalMaxValues))
	assert.ErrorIs(t, err, errMarshal, "nested lists of more values than a frame may hold")
	_, err = marshalDecode(marshalList("{u\x01\x00\x00\x00aN0", marshalMaxValues/2))
	assert.ErrorIs(t, err, errMarshal, "dicts of more keys and values than a frame may hold")
}

// marshalList is a marshalled list of n copies of the marshalled value elem.
func marshalList(elem string, n int) []byte {
	b := binary.LittleEndian.AppendUint32([]byte{'['}, uint32(n))
	return append(b, bytes.Repeat([]byte(elem), n)...)
}

// allocated returns the bytes f allocated (of the whole process: the test must not be parallel).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestMarshalDecodeBoundsMemory decodes frames as large as the driver may send, made of the
// values that cost the most memory per byte: what they decode to stays within the frame's size
// plus a few MiB, not a multiple of the frame.
func TestMarshalDecodeBoundsMemory(t *testing.T) {
	frameLimit := (&Local{cfg: Config{OutputLimit: 1 << 20}}).maxFrame()
	slack := uint64(8 << 20)
	tests := []struct {
		name string
		give string // one marshalled value, repeated
	}{
		{"Nones", "N"},
		{"empty dicts", "{0"},
		{"empty lists", "[\x00\x00\x00\x00"},
		{"small ints", "i\x07\x00\x00\x00"},
		{"ints", "i\x07\x01\x00\x00"},
		{"longs", "l\x03\x00\x00\x00\x01\x00\x01\x00\x01\x00"},
		{"floats", "g\x00\x00\x00\x00\x00\x00\xf0\x3f"},
		{"empty strings", "u\x00\x00\x00\x00"},
		{"empty bytes", "s\x00\x00\x00\x00"},
		{"dicts of one key", "{u\x01\x00\x00\x00aN0"},
	}
	for _, tt := range tests {
		frame := marshalList(tt.give, (frameLimit-5)/len(tt.give))
		var err error
		got := allocated(func() { _, err = marshalDecode(frame) })
		assert.ErrorIs(t, err, errMarshal, "%s: a %d-byte frame of them is refused", tt.name, len(frame))
		assert.LessOrEqual(t, got, slack, "%s: memory for a refused %d-byte frame", tt.name, len(frame))

		frame = marshalList(tt.give, marshalMaxValues-1)
		got = allocated(func() { _, _ = marshalDecode(frame) })
		assert.LessOrEqual(t, got, uint64(len(frame))+slack, "%s: memory for the most of them a frame holds", tt.name)
	}
	frame := binary.LittleEndian.AppendUint32([]byte{'u'}, uint32(frameLimit-5))
	frame = append(frame, bytes.Repeat([]byte("x"), frameLimit-5)...)
	var err error
	got := allocated(func() { _, err = marshalDecode(frame) })
	require.NoError(t, err, "a string as long as a frame")
	assert.LessOrEqual(t, got, uint64(len(frame))+slack, "memory for a string as long as a frame")
}

// TestMarshalDecodeTakesTheLargestResult decodes the largest answer the driver sends: one file
// entry per file scanned, as many images as a run returns.
func TestMarshalDecodeTakesTheLargestResult(t *testing.T) {
	files := make([]any, maxFiles)
	for i := range files {
		files[i] = []any{"/mnt/data/f" + strconv.Itoa(i), int64(i)}
	}
	images := make([]any, maxImages)
	for i := range images {
		images[i] = []byte("\x89PNG")
	}
	give := map[string]any{
		"op": "result", "seq": int64(1), "value": "v", "truncated": true, "files": files, "images": images,
		"error": map[string]any{"name": "E", "value": "v", "traceback": "t"},
	}
	b, err := marshalEncode(give)
	require.NoError(t, err, "encode")
	got, err := marshalDecode(b)
	require.NoError(t, err, "decode the largest result")
	assert.Equal(t, give, got, "round trip of the largest result")
}

func FuzzMarshalDecode(f *testing.F) {
	for _, v := range []any{
		map[string]any{"op": "result", "seq": int64(1), "images": []any{[]byte("png")}, "error": nil},
		[]any{int64(1) << 45, -2.5, "x", true},
	} {
		b, err := marshalEncode(v)
		require.NoError(f, err, "seed")
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := marshalDecode(data)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes and re-encodes the same (bytes
		// are compared, not values: NaN is not equal to itself).
		b, err := marshalEncode(v)
		require.NoError(t, err, "re-encode %#v", v)
		again, err := marshalDecode(b)
		require.NoError(t, err, "decode the re-encoding of %#v", v)
		b2, err := marshalEncode(again)
		require.NoError(t, err, "re-encode again %#v", again)
		assert.Equal(t, b, b2, "stable through a round trip")
	})
}

func TestReadFrameLimit(t *testing.T) {
	body, err := marshalEncode(map[string]any{"op": "ready"})
	require.NoError(t, err, "encode")
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = append(frame, body...)

	got, err := readFrame(bytes.NewReader(frame), 1024)
	require.NoError(t, err, "a frame within the limit")
	assert.Equal(t, "ready", got["op"], "decoded")

	_, err = readFrame(bytes.NewReader(frame), len(body)-1)
	assert.ErrorContains(t, err, "exceeds", "a frame beyond the limit is refused before it is read")
	_, err = readFrame(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), 1<<20)
	assert.ErrorContains(t, err, "exceeds", "a hostile length is refused")
	_, err = readFrame(bytes.NewReader(frame[:len(frame)-1]), 1024)
	assert.Error(t, err, "a cut frame")
	notDict, err := marshalEncode([]any{int64(1)})
	require.NoError(t, err, "encode")
	_, err = readFrame(bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, uint32(len(notDict))), notDict...)), 1024)
	assert.ErrorIs(t, err, errMarshal, "a frame that is not a dict")
}

// runSeccomp interprets the filter's classic BPF for one system call, as the kernel would.
func runSeccomp(t *testing.T, prog []byte, arch uint32, nr int, arg0 uint64) uint32 {
	t.Helper()
	var data [64]byte // struct seccomp_data
	binary.NativeEndian.PutUint32(data[seccompOff:], uint32(nr))
	binary.NativeEndian.PutUint32(data[seccompArc:], arch)
	binary.NativeEndian.PutUint64(data[16:], arg0)
	var acc uint32
	for pc := 0; pc < len(prog)/8; pc++ {
		b := prog[8*pc:]
		code, jt, jf, k := binary.NativeEndian.Uint16(b), b[2], b[3], binary.NativeEndian.Uint32(b[4:])
		switch code {
		case bpfLdWAbs:
			require.LessOrEqual(t, int(k)+4, len(data), "load at %d inside seccomp_data", k)
			acc = binary.NativeEndian.Uint32(data[k:])
		case bpfJeqK, bpfJgeK, bpfJsetK:
			taken := acc == k
			switch code {
			case bpfJgeK:
				taken = acc >= k
			case bpfJsetK:
				taken = acc&k != 0
			}
			if taken {
				pc += int(jt)
			} else {
				pc += int(jf)
			}
		case bpfRetK:
			return k
		default:
			t.Fatalf("instruction %d: unknown opcode %#x", pc, code)
		}
	}
	t.Fatalf("the filter ran off its end for call %d", nr)
	return 0
}

func TestSeccompProgram(t *testing.T) {
	prog, err := seccompProgram()
	require.NoError(t, err, "build")
	if seccompArch == 0 {
		assert.Nil(t, prog, "no filter on this architecture")
		return
	}
	require.Zero(t, len(prog)%8, "whole instructions")
	eperm := uint32(seccompRetErrno | uint32(syscall.EPERM))
	noFamily := uint32(seccompRetErrno | uint32(syscall.EAFNOSUPPORT))
	for _, nr := range seccompDenied() {
		assert.Equal(t, eperm, runSeccomp(t, prog, seccompArch, nr, 0), "denied call %d fails with EPERM", nr)
	}
	for _, nr := range []int{unix.SYS_READ, unix.SYS_WRITE, unix.SYS_OPENAT, unix.SYS_CLONE, unix.SYS_CONNECT} {
		assert.Equal(t, uint32(seccompRetAllow), runSeccomp(t, prog, seccompArch, nr, 0), "call %d is allowed", nr)
	}
	assert.Equal(t, uint32(seccompRetKillProcess), runSeccomp(t, prog, seccompArch^1, unix.SYS_READ, 0),
		"a foreign architecture kills the process")
	if seccompX32Bit != 0 {
		assert.Equal(t, eperm, runSeccomp(t, prog, seccompArch, seccompX32Bit|unix.SYS_READ, 0), "x32 calls are refused")
	}
	families := []struct {
		name   string
		family uint64
		want   uint32
	}{
		{"AF_UNIX", unix.AF_UNIX, seccompRetAllow},
		{"AF_INET", unix.AF_INET, seccompRetAllow},
		{"AF_INET6", unix.AF_INET6, seccompRetAllow},
		{"AF_UNIX with high bits set (the kernel reads an int)", 1<<32 | unix.AF_UNIX, seccompRetAllow},
		{"AF_VSOCK", unix.AF_VSOCK, noFamily},
		{"AF_NETLINK", unix.AF_NETLINK, noFamily},
		{"AF_PACKET", unix.AF_PACKET, noFamily},
		{"AF_ALG", unix.AF_ALG, noFamily},
		{"AF_BLUETOOTH", unix.AF_BLUETOOTH, noFamily},
		{"AF_UNSPEC", unix.AF_UNSPEC, noFamily},
		{"AF_ROSE (11) with high bits set", 1<<32 | unix.AF_ROSE, noFamily},
	}
	for _, nr := range seccompSocketCalls() {
		for _, f := range families {
			assert.Equal(t, f.want, runSeccomp(t, prog, seccompArch, nr, f.family), "call %d with family %s", nr, f.name)
		}
	}
	clones := []struct {
		name  string
		flags uint64
		want  uint32
	}{
		{"fork (SIGCHLD)", uint64(unix.SIGCHLD), seccompRetAllow},
		{"a thread", unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
			unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID, seccompRetAllow},
		{"vfork", unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD), seccompRetAllow},
		{"CLONE_PARENT", unix.CLONE_PARENT | uint64(unix.SIGCHLD), eperm},
		{"CLONE_PARENT with a thread's flags", unix.CLONE_PARENT | unix.CLONE_VM | unix.CLONE_THREAD, eperm},
	}
	for _, c := range clones {
		assert.Equal(t, c.want, runSeccomp(t, prog, seccompArch, unix.SYS_CLONE, c.flags), "clone: %s", c.name)
	}
	assert.Equal(t, uint32(seccompRetErrno|uint32(syscall.ENOSYS)), runSeccomp(t, prog, seccompArch, unix.SYS_CLONE3, 0),
		"clone3 fails with ENOSYS (glibc falls back to clone)")
}
