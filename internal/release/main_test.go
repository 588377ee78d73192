package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's root directory, seen from this package's.
const repoRoot = "../.."

// libraryTags lists the directories of the nested library modules, whose
// tags follow the root module's.
var libraryTags = []string{"echo5rl", "fiber3rl", "grpcrl", "metrics/otel", "metrics/prometheus"}

// ours matches a requirement of a module of the repository and its version.
var ours = regexp.MustCompile(`(?m)^(\s*(?:require\s+)?github\.com/redlimit/redlimit(?:/\S+)?) v\S+`)

// copyRepo copies the repository's go.mod and go.sum files into a temporary
// directory, keeping the layout, with the Go files beside each go.mod (their
// package clause tells a library from a program), and returns that directory
// and the go.mod files' contents by path relative to it.
func copyRepo(t *testing.T) (string, map[string]string) {
	t.Helper()
	dst := t.TempDir()
	gomods := map[string]string{}
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != repoRoot && (d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		dir := filepath.Dir(p)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return err
		}
		files = append(files, p, filepath.Join(dir, "go.sum"))
		for _, src := range files {
			data, err := os.ReadFile(src)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(repoRoot, src)
			if err != nil {
				return err
			}
			target := filepath.Join(dst, rel)
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(target, data, 0o644); err != nil {
				return err
			}
			if filepath.Base(src) == "go.mod" {
				gomods[filepath.ToSlash(rel)] = string(data)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, gomods, "go.mod")
	require.Contains(t, gomods, "echo5rl/go.mod")
	return dst, gomods
}

// runRelease runs the command with args and returns its exit code, its
// output and its errors.
func runRelease(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// readFile returns the content of the file at dir/rel.
func readFile(t *testing.T, dir, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(data)
}

// lineOf returns the number of the first line of text that contains s.
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	for i, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			return i + 1
		}
	}
	t.Fatalf("no line contains %q", s)
	return 0
}

// goModEdit runs go mod edit with args in the directory dir.
func goModEdit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"mod", "edit"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func TestSetVersion(t *testing.T) {
	t.Parallel()
	dir, before := copyRepo(t)
	const version = "v0.2.0-rc.1"

	code, stdout, stderr := runRelease("-repo", dir, version)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)

	// Each go.mod is as it was but for the versions of the repository's
	// modules: replace directives and other requirements are kept, and the
	// go command's formatting too.
	set := 0
	for rel, old := range before {
		want := ours.ReplaceAllString(old, "${1} "+version)
		set += len(ours.FindAllString(old, -1))
		assert.Equal(t, want, readFile(t, dir, rel), rel)
		assert.Equal(t, strings.Count(old, "=>"), strings.Count(readFile(t, dir, rel), "=>"), "replace directives of %s", rel)
	}
	assert.GreaterOrEqual(t, set, 18, "requirements of the repository's modules")
	assert.Contains(t, readFile(t, dir, "echo5rl/go.mod"), "replace github.com/redlimit/redlimit => ../\n")
	assert.Contains(t, readFile(t, dir, "echo5rl/go.mod"), "\tgithub.com/redlimit/redlimit "+version+"\n")

	// The tags come first, the root module's then the nested library
	// modules', then the git commands that make and push them.
	tags := []string{version}
	for _, d := range libraryTags {
		tags = append(tags, d+"/"+version)
	}
	lines := strings.Split(stdout, "\n")
	require.Greater(t, len(lines), len(tags))
	assert.Equal(t, tags, lines[:len(tags)])
	assert.Equal(t, "", lines[len(tags)])
	for _, tag := range tags {
		assert.Contains(t, lines, "git tag "+tag)
	}
	assert.Contains(t, lines, "git push origin "+strings.Join(tags, " "))
	assert.NotContains(t, stdout, "examples/")
	assert.NotContains(t, stdout, "benchmarks/")

	code, stdout, stderr = runRelease("-repo", dir, "-check")
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)
	assert.Empty(t, stderr)

	code, stdout, stderr = runRelease("-repo", dir, "-version")
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, version+"\n", stdout)
}

func TestBadVersions(t *testing.T) {
	t.Parallel()
	dir, before := copyRepo(t)
	for _, v := range []string{
		"", "1.2.3", "v1.2", "v1.2.3.4", "v1.2.3+build", "v01.2.3", "v1.02.3",
		"v1.2.3-", "v1.2.3-rc..1", "v1.2.3-01", "v2.0.0", "v10.1.0", "latest",
		"v0.0.0-00010101000000-000000000000",
		"v0.0.0-20260101120000-abcdefabcdef",
		"v1.2.4-0.20260101120000-abcdefabcdef",
		"v1.2.3-rc.1.0.20260101120000-abcdefabcdef",
	} {
		code, stdout, stderr := runRelease("-repo", dir, v)
		assert.Equal(t, 2, code, "version %q", v)
		assert.Empty(t, stdout, "version %q", v)
		assert.Contains(t, stderr, "release: version", "version %q", v)
	}
	for rel, old := range before {
		assert.Equal(t, old, readFile(t, dir, rel), "%s changed", rel)
	}

	for _, v := range []string{"v0.1.0", "v1.0.0", "v1.2.3-rc.1", "v0.1.0-alpha.0", "v1.10.100-beta-2"} {
		assert.NoError(t, validate(v), v)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"-check", "v1.0.0"},
		{"-check", "-version"},
		{"v1.0.0", "v1.0.1"},
		{"-nope"},
	} {
		code, stdout, stderr := runRelease(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.Empty(t, stdout, "%q", args)
		assert.Contains(t, stderr, "usage:", "%q", args)
	}

	code, _, stderr := runRelease("-repo", t.TempDir(), "-check")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "is not the repository's root")
}

func TestCheckFindsPseudoVersion(t *testing.T) {
	t.Parallel()
	dir, _ := copyRepo(t)
	code, _, stderr := runRelease("-repo", dir, "v0.3.0")
	require.Equal(t, 0, code, stderr)

	const pseudo = "v0.3.1-0.20260101120000-abcdefabcdef"
	goModEdit(t, filepath.Join(dir, "grpcrl"), "-require=github.com/redlimit/redlimit@"+pseudo)
	line := lineOf(t, readFile(t, dir, "grpcrl/go.mod"), pseudo)

	code, stdout, stderr := runRelease("-repo", dir, "-check")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "grpcrl/go.mod:"+strconv.Itoa(line)+": github.com/redlimit/redlimit "+pseudo+
		" is a pseudo-version; set a release with go run ./internal/release vX.Y.Z\n", stderr)

	code, stdout, _ = runRelease("-repo", dir, "-version")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
}

func TestCheckFindsDifferentVersions(t *testing.T) {
	t.Parallel()
	dir, _ := copyRepo(t)
	code, _, stderr := runRelease("-repo", dir, "v0.3.0")
	require.Equal(t, 0, code, stderr)

	goModEdit(t, filepath.Join(dir, "metrics", "otel"), "-require=github.com/redlimit/redlimit@v0.2.9")
	line := lineOf(t, readFile(t, dir, "metrics/otel/go.mod"), "v0.2.9")

	code, stdout, stderr := runRelease("-repo", dir, "-check")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Regexp(t, `^metrics/otel/go.mod:`+strconv.Itoa(line)+`: github.com/redlimit/redlimit v0.2.9 differs from v0.3.0 at benchmarks/go.mod:\d+\n$`, stderr)
}

// TestRepository checks the repository itself: its modules require each
// other at one released version, and its library modules are the root
// module and the adapters' and metrics' modules.
func TestRepository(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runRelease("-repo", repoRoot, "-check")
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)

	code, stdout, stderr = runRelease("-repo", repoRoot, "-modules")
	require.Equal(t, 0, code, stderr)
	want := "github.com/redlimit/redlimit .\n"
	for _, d := range libraryTags {
		want += "github.com/redlimit/redlimit/" + d + " " + d + "\n"
	}
	assert.Equal(t, want, stdout)
}
