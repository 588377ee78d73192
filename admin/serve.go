package admin

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/redlimit/redlimit/internal/ops"
	"github.com/redlimit/redlimit/policy"
)

// Bounds of the keys listed at once.
const (
	defaultKeys = 1000
	maxKeys     = 100_000
)

// maxBody bounds a request's body: an override's is a few bytes.
const maxBody = 1 << 10

func (h *handler) policies(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Policies []json.RawMessage `json:"policies"`
	}{append([]json.RawMessage{}, h.listed...)})
}

func (h *handler) policy(w http.ResponseWriter, r *http.Request) {
	if name, _, ok := h.find(w, r); ok {
		writeJSON(w, http.StatusOK, h.describe[name])
	}
}

func (h *handler) keys(w http.ResponseWriter, r *http.Request) {
	name, p, ok := h.find(w, r)
	if !ok {
		return
	}
	limit := defaultKeys
	if q := r.URL.Query().Get("limit"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > maxKeys {
			problem(w, http.StatusBadRequest, fmt.Sprintf("limit %q: a whole number from 1 to %d", q, maxKeys))
			return
		}
		limit = n
	}
	keys, err := ops.ListKeys(r.Context(), p, name, limit)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, keys)
}

func (h *handler) state(w http.ResponseWriter, r *http.Request) {
	name, p, ok := h.find(w, r)
	if !ok {
		return
	}
	s, err := ops.Peek(r.Context(), p, name, r.PathValue("key"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *handler) reset(w http.ResponseWriter, r *http.Request) {
	_, p, ok := h.find(w, r)
	if !ok {
		return
	}
	if err := p.Reset(r.Context(), r.PathValue("key")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) override(w http.ResponseWriter, r *http.Request) {
	name, p, ok := h.find(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	limit, ok, err := p.Override(r.Context(), key)
	switch {
	case err != nil:
		fail(w, err)
	case !ok:
		problem(w, http.StatusNotFound, fmt.Sprintf("the key %q has no override in policy %q: it has the policy's limit", key, name))
	default:
		writeJSON(w, http.StatusOK, ops.Override{Policy: name, Key: key, Limit: &limit})
	}
}

func (h *handler) setOverride(w http.ResponseWriter, r *http.Request) {
	name, p, ok := h.find(w, r)
	if !ok {
		return
	}
	limit, err := readLimit(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		problem(w, http.StatusBadRequest, fmt.Sprintf(`the body must be {"limit": N}, a whole number of permits (or slots): %v`, err))
		return
	}
	key := r.PathValue("key")
	if err := p.SetOverride(r.Context(), key, limit); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ops.Override{Policy: name, Key: key, Limit: &limit})
}

// readLimit reads the body of an override, {"limit": N}: one object of
// exactly that field, once, spelt so (encoding/json alone would take
// "Limit", or the last of two "limit"s).
func readLimit(body io.Reader) (int64, error) {
	dec := json.NewDecoder(body)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, errors.New("not a JSON object")
	}
	var limit *int64
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return 0, err
		}
		switch {
		case t != "limit":
			return 0, fmt.Errorf("unknown field %q", t)
		case limit != nil:
			return 0, errors.New(`"limit" twice`)
		}
		if err := dec.Decode(&limit); err != nil || limit == nil {
			return 0, fmt.Errorf(`"limit": %v`, cmp.Or(err, errors.New("null")))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return 0, err
	}
	switch {
	case dec.Decode(&struct{}{}) != io.EOF:
		return 0, errors.New("more than one JSON value")
	case limit == nil:
		return 0, errors.New(`no "limit"`)
	}
	return *limit, nil
}

func (h *handler) deleteOverride(w http.ResponseWriter, r *http.Request) {
	_, p, ok := h.find(w, r)
	if !ok {
		return
	}
	if err := p.DeleteOverride(r.Context(), r.PathValue("key")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// find returns the policy the request names, or answers 404.
func (h *handler) find(w http.ResponseWriter, r *http.Request) (string, *policy.Policy, bool) {
	name := r.PathValue("name")
	p := h.byName[name]
	if p == nil {
		problem(w, http.StatusNotFound, fmt.Sprintf("no policy named %q here: /policies lists those there are", name))
		return "", nil, false
	}
	return name, p, true
}

// writeJSON answers v as JSON, with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error()) // plain values: never
		return
	}
	header(w, "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// header sets the header fields of every answer.
func header(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}
