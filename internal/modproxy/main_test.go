package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFiles writes files, by slash-separated path relative to dir, into
// dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// goCommand runs the go command with args in dir, with a module cache of its
// own, the module proxy at proxyDir and no checksum database, and returns
// its output.
func goCommand(t *testing.T, dir, proxyDir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GOPROXY="+(&url.URL{Scheme: "file", Path: filepath.ToSlash(proxyDir)}).String(),
		"GOMODCACHE="+t.TempDir(),
		"GOFLAGS=-modcacherw",
		"GOSUMDB=off",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
	)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
	return string(out)
}

func TestWrite(t *testing.T) {
	t.Parallel()
	src, out, user := t.TempDir(), t.TempDir(), t.TempDir()
	gomod := "module example.com/Lib\n\ngo 1.25.0\n"
	writeFiles(t, src, map[string]string{
		"go.mod":          gomod,
		"lib.go":          "// Package lib is a library.\npackage lib\n\n// Answer is the answer.\nconst Answer = 42\n",
		"inner/inner.go":  "// Package inner is a package of the module.\npackage inner\n",
		"nested/go.mod":   "module example.com/Lib/nested\n\ngo 1.25.0\n",
		"nested/child.go": "package nested\n",
		".git/HEAD":       "ref: refs/heads/main\n",
	})
	const version = "v1.2.3-RC.1"
	require.NoError(t, write(out, "example.com/Lib", version, src))

	// The layout of a module proxy, with the path and version escaped.
	at := filepath.Join(out, "example.com", "!lib", "@v")
	list, err := os.ReadFile(filepath.Join(at, "list"))
	require.NoError(t, err)
	assert.Equal(t, version+"\n", string(list))
	data, err := os.ReadFile(filepath.Join(at, "v1.2.3-!r!c.1.info"))
	require.NoError(t, err)
	var inf info
	require.NoError(t, json.Unmarshal(data, &inf))
	assert.Equal(t, version, inf.Version)
	assert.False(t, inf.Time.IsZero())
	mod, err := os.ReadFile(filepath.Join(at, "v1.2.3-!r!c.1.mod"))
	require.NoError(t, err)
	assert.Equal(t, gomod, string(mod))

	// The zip holds the module's files, without the nested module's or the
	// VCS directory's.
	zr, err := zip.OpenReader(filepath.Join(at, "v1.2.3-!r!c.1.zip"))
	require.NoError(t, err)
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	prefix := "example.com/Lib@" + version + "/"
	assert.Equal(t, []string{prefix + "go.mod", prefix + "inner/inner.go", prefix + "lib.go"}, names)

	// The go command finds the version, downloads and verifies the module,
	// and builds a program with it.
	writeFiles(t, user, map[string]string{
		"go.mod":  "module example.com/try\n\ngo 1.25.0\n",
		"main.go": "package main\n\nimport \"example.com/Lib\"\n\nfunc main() { println(lib.Answer) }\n",
	})
	assert.Equal(t, "example.com/Lib "+version+"\n", goCommand(t, user, out, "list", "-m", "-versions", "example.com/Lib"))
	goCommand(t, user, out, "get", "example.com/Lib@"+version)
	goCommand(t, user, out, "build", "-o", os.DevNull, ".")
}

func TestWriteRefusesAnotherModule(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"go.mod": "module example.com/other\n\ngo 1.25.0\n"})
	err := write(t.TempDir(), "example.com/lib", "v1.0.0", src)
	assert.ErrorContains(t, err, `module "example.com/other", want "example.com/lib"`)
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"-version", "v1.0.0"},
		{"-out", t.TempDir()},
		{"-version", "v1.0", "-out", t.TempDir()},
		{"-version", "v1.0.0+meta", "-out", t.TempDir()},
		{"-version", "v1.0.0", "-out", t.TempDir(), "extra"},
	} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 2, run(args, &stdout, &stderr), "%q", args)
		assert.Empty(t, stdout.String(), "%q", args)
		assert.NotEmpty(t, stderr.String(), "%q", args)
	}
}

// TestRepository writes the proxy of this repository's library modules.
func TestRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the repository's release command")
	}
	t.Parallel()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-repo", "../..", "-version", "v0.9.0", "-out", out}, &stdout, &stderr), stderr.String())
	paths := strings.Fields(stdout.String())
	require.NotEmpty(t, paths)
	assert.Equal(t, "github.com/redlimit/redlimit", paths[0])
	assert.Contains(t, paths, "github.com/redlimit/redlimit/echo5rl")
	assert.Contains(t, paths, "github.com/redlimit/redlimit/metrics/prometheus")
	assert.NotContains(t, paths, "github.com/redlimit/redlimit/internal/modproxy")
	assert.NotContains(t, paths, "github.com/redlimit/redlimit/benchmarks")
	for _, p := range paths {
		assert.FileExists(t, filepath.Join(out, filepath.FromSlash(p), "@v", "v0.9.0.zip"))
	}

	// The root module's zip leaves out the modules of their own.
	zr, err := zip.OpenReader(filepath.Join(out, "github.com", "redlimit", "redlimit", "@v", "v0.9.0.zip"))
	require.NoError(t, err)
	defer zr.Close()
	var core bool
	for _, f := range zr.File {
		name := strings.TrimPrefix(f.Name, "github.com/redlimit/redlimit@v0.9.0/")
		core = core || name == "core/doc.go"
		assert.False(t, strings.HasPrefix(name, "echo5rl/") || strings.HasPrefix(name, "internal/modproxy/") || strings.HasPrefix(name, "benchmarks/"), name)
	}
	assert.True(t, core, "core/doc.go in the root module's zip")
}
