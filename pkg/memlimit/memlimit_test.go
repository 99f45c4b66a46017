package memlimit

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValid(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{give: "1g", want: true},
		{give: "4g", want: true},
		{give: "16g", want: true},
		{give: "64g", want: true},
		{give: "2g"},
		{give: "4G"},
		{give: "4096m"},
		{give: ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Valid(tt.give), "Valid(%q)", tt.give)
	}
}

func TestSizesIsACopy(t *testing.T) {
	got := Sizes()
	assert.Equal(t, []string{"1g", "4g", "16g", "64g"}, got, "the sizes, smallest first")
	got[0] = "8g"
	assert.Equal(t, "1g", Sizes()[0], "changing the returned slice changes nothing")
}
