package messages

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// This file is the container_upload content block: a file of the Files API that the client
// hands to the container ({"type":"container_upload","file_id":"file_…"} in a user turn).
// Natively the file is put in the container's input directory; here that is /mnt/data, where
// the loop copies it before the first run (as it copies the Responses tool's
// container.file_ids), and the model, which natively never sees the block, reads a text block
// telling it where the file is.

// maxUploads bounds the distinct files a request's container_upload blocks name, as the
// Responses tool's container.file_ids are bounded.
const maxUploads = 50

// uploadNote is the text block a container_upload block becomes for the model.
func uploadNote(fileID string) string {
	return quote("[The file " + fileID + " was uploaded to the container's input directory, /mnt/data (the working " +
		"directory), under the name it was uploaded with.]")
}

// rewriteUploads turns the container_upload blocks of the user turns into text blocks that
// tell the model where the file is, and returns the distinct file ids they name, in order.
// A body without any stays byte for byte as it was.
func rewriteUploads(body []byte) ([]byte, []string, error) {
	msgs := gjson.GetBytes(body, "messages")
	if !msgs.IsArray() || !bytes.Contains([]byte(msgs.Raw), []byte(`"container_upload"`)) {
		return body, nil, nil
	}
	var ids []string
	out := make([]string, 0, 8)
	changed := false
	for i, m := range msgs.Array() {
		content := m.Get("content")
		if !content.IsArray() || !strings.Contains(content.Raw, `"container_upload"`) {
			out = append(out, m.Raw)
			continue
		}
		blocks := make([]string, 0, 4)
		for j, b := range content.Array() {
			if b.Get("type").String() != "container_upload" {
				blocks = append(blocks, b.Raw)
				continue
			}
			param := fmt.Sprintf("messages.%d.content.%d", i, j)
			if m.Get("role").String() != "user" {
				return nil, nil, badRequest("%s: container_upload blocks may only be sent in user turns", param)
			}
			id := b.Get("file_id")
			if id.Type != gjson.String || id.String() == "" {
				return nil, nil, badRequest("%s.file_id: Field required", param)
			}
			if !slices.Contains(ids, id.String()) {
				if len(ids) == maxUploads {
					return nil, nil, badRequest("%s: at most %d files may be uploaded to the container per request", param, maxUploads)
				}
				ids = append(ids, id.String())
			}
			text := `{"type":"text","text":` + uploadNote(id.String())
			if cc := b.Get("cache_control"); cc.Exists() {
				text += `,"cache_control":` + cc.Raw
			}
			blocks = append(blocks, text+"}")
		}
		res, err := sjson.SetRaw(m.Raw, "content", "["+strings.Join(blocks, ",")+"]")
		if err != nil {
			return nil, nil, fmt.Errorf("rewrite container_upload: %w", err)
		}
		out, changed = append(out, res), true
	}
	if !changed {
		return body, nil, nil
	}
	res, err := sjson.SetRawBytes(body, "messages", []byte("["+strings.Join(out, ",")+"]"))
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite container_upload: %w", err)
	}
	return res, ids, nil
}
