package admin

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/policy"
)

// readOnlyType is the problem type of a write refused by a read-only
// handler.
const readOnlyType = "https://github.com/redlimit/redlimit/blob/main/docs/operations.md#the-admin-endpoint"

// problem answers an RFC 9457 problem of status, saying detail.
func problem(w http.ResponseWriter, status int, detail string) {
	problemOf(w, status, "about:blank", detail)
}

// problemOf answers a problem of type typ.
func problemOf(w http.ResponseWriter, status int, typ, detail string) {
	b, err := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{typ, http.StatusText(status), status, detail})
	if err != nil {
		b = []byte(`{"type":"about:blank"}`) // strings and an int: never
	}
	header(w, policy.ProblemContentType)
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// fail answers the error of a policy's call: 400 for a key or limit that
// cannot be, 500 for keys in Redis that no limiter wrote, and otherwise 503:
// Redis did not answer, or refused. The detail is the error, for the
// operator: it names no password.
func fail(w http.ResponseWriter, err error) {
	status := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, core.ErrInvalidName), errors.Is(err, core.ErrInvalidPermits):
		status = http.StatusBadRequest
	case errors.Is(err, core.ErrInvalidConfig):
		status = http.StatusInternalServerError
	}
	problem(w, status, err.Error())
}
