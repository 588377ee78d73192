package native

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Headers sets fields as http.Header.Set does, whatever their number, and
// a value appended to later (Header.Add) leaves the others as they were.
func TestHeadersSet(t *testing.T) {
	var hs Headers
	h := http.Header{}
	for i := range 9 {
		hs.Set(h, "X-"+strconv.Itoa(i), strconv.Itoa(i))
	}
	for i := range 9 {
		assert.Equal(t, []string{strconv.Itoa(i)}, h["X-"+strconv.Itoa(i)])
	}
	h.Add("X-0", "more")
	assert.Equal(t, []string{"0", "more"}, h["X-0"])
	assert.Equal(t, []string{"1"}, h["X-1"], "untouched by the append")
	hs.Set(h, "X-1", "")
	assert.NotContains(t, h, "X-1", "an empty value removes the field")
}
