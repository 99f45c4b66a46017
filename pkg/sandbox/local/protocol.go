package local

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// frameMsg is a frame of the driver as readFrames delivers it: a decoded answer (readyAnswer,
// resultAnswer), or why there is none.
type frameMsg struct {
	a   any
	err error
}

// maxFrame bounds one answer from the driver: the capped value, error value and traceback,
// images and file list, base64-free. A longer frame means the driver is not ours any more.
func (l *Local) maxFrame() int {
	return 5*l.cfg.OutputLimit + 4<<20
}

// readFrames delivers the driver's answers until its pipe ends or Delete.
func (c *container) readFrames() {
	limit := c.l.maxFrame()
	for {
		v, err := readFrame(c.ctlR, limit)
		f := frameMsg{err: err}
		if err == nil {
			f.a, f.err = decodeAnswer(v)
		}
		select {
		case c.frames <- f:
		case <-c.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// readFrame reads one length-prefixed marshal frame; a frame longer than limit is an error
// and is not read.
func readFrame(r io.Reader, limit int) (map[string]any, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	n := binary.BigEndian.Uint32(head[:])
	if int64(n) > int64(limit) {
		return nil, fmt.Errorf("read frame: %d bytes exceeds the %d-byte limit", n, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	v, err := marshalDecode(body)
	if err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("read frame: %w: a %T, not a dict", errMarshal, v)
	}
	return m, nil
}

func writeFrame(w io.Writer, v map[string]any) error {
	body, err := marshalEncode(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	_, err = w.Write(append(buf, body...))
	return err
}

// request is a frame to the driver: runRequest, resumeRequest.
type request interface{ encode() map[string]any }

// send writes a request to the driver. The request is written whole even when ctx ends
// meanwhile (the run is then interrupted, which the driver honours as the run starts), but a
// driver that does not read it is given up InterruptGrace after ctx ends.
func (c *container) send(ctx context.Context, req request) error {
	_ = c.ctlW.SetWriteDeadline(time.Time{})
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.ctlW.SetWriteDeadline(time.Now().Add(c.l.cfg.InterruptGrace))
		close(fired)
	})
	err := writeFrame(c.ctlW, req.encode())
	if !stop() {
		<-fired
	}
	return err
}

// checkAnswer returns run seq's result from a frame the driver sent during that run. Each run
// takes its own answer, so any other frame, of an earlier run or a later one, was forged.
func checkAnswer(f frameMsg, seq uint64) (resultAnswer, error) {
	if f.err != nil {
		return resultAnswer{}, f.err
	}
	switch a := f.a.(type) {
	case resultAnswer:
		if a.seq == int64(seq) {
			return a, nil
		}
		return resultAnswer{}, fmt.Errorf("protocol violation: the answer to run %d is a \"result\" frame of run %d", seq, a.seq)
	default:
		return resultAnswer{}, fmt.Errorf("protocol violation: the answer to run %d is a \"ready\" frame", seq)
	}
}
