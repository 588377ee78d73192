// Package readme_test keeps the documentation honest about code. Every Go
// block of README.md is the body, or a part of the body, of an Example
// function in the repository's tests, so that it compiles, and runs with
// its output checked where the Example has one; every Go block of docs/ is
// part of an Example function too, or of a function of a program under
// examples/. The tests the documents name as evidence exist, and links
// between the documents, and the links to them in the code, lead to files
// and headings that exist.
package readme_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// block is a fenced block of a Markdown file.
type block struct {
	file string
	line int // of the opening fence
	lang string
	text string
}

// blocks returns the fenced blocks of the Markdown file path.
func blocks(t *testing.T, path string) []block {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []block
	var cur *block
	var body []string
	for i, line := range strings.Split(string(src), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{file: path, line: i + 1, lang: strings.TrimPrefix(trimmed, "```")}
			body = body[:0]
		case cur != nil && trimmed == "```":
			cur.text = strings.Join(body, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	require.Nil(t, cur, "%s: a fenced block is not closed", path)
	return out
}

// normalize turns every run of white space into one space, so that blocks
// compare whatever their indentation and alignment.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// funcBodies returns the normalized bodies of the functions declared in the
// Go files under dir that keep reports whether to read and that match.
func funcBodies(t *testing.T, dir string, keep func(path string) bool, match func(*ast.FuncDecl) bool) []string {
	t.Helper()
	var bodies []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != dir && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !keep(path) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			// A file being edited elsewhere in the tree; the compiler
			// reports it where it matters, and its blocks are not found.
			t.Logf("skipped: %v", err)
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !match(fn) {
				continue
			}
			from, to := fset.Position(fn.Body.Lbrace).Offset+1, fset.Position(fn.Body.Rbrace).Offset
			bodies = append(bodies, normalize(string(src[from:to])))
		}
		return nil
	})
	require.NoError(t, err)
	return bodies
}

// examples returns the normalized bodies of the Example functions of every
// test file in the repository.
func examples(t *testing.T) []string {
	t.Helper()
	isExample := func(fn *ast.FuncDecl) bool {
		return fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") && fn.Type.Params.NumFields() == 0
	}
	bodies := funcBodies(t, root, func(path string) bool { return strings.HasSuffix(path, "_test.go") }, isExample)
	require.NotEmpty(t, bodies, "no Example functions found under %s", root)
	return bodies
}

// programs returns the normalized bodies of every function of the programs
// under examples/.
func programs(t *testing.T) []string {
	t.Helper()
	return funcBodies(t, filepath.Join(root, "examples"),
		func(path string) bool { return !strings.HasSuffix(path, "_test.go") },
		func(*ast.FuncDecl) bool { return true })
}

// checkGoBlocks fails the test for each Go block of the Markdown file path
// that is not part of one of bodies, and returns how many it checked.
func checkGoBlocks(t *testing.T, path string, bodies []string, where string) int {
	t.Helper()
	n := 0
	for _, b := range blocks(t, path) {
		if b.lang != "go" {
			continue
		}
		n++
		want := normalize(b.text)
		require.NotEmpty(t, want, "%s:%d: an empty Go block", b.file, b.line)
		found := false
		for _, body := range bodies {
			if strings.Contains(body, want) {
				found = true
				break
			}
		}
		first, _, _ := strings.Cut(strings.TrimSpace(b.text), "\n")
		assert.True(t, found, "%s:%d: this Go block is not part of %s: copy it into one, or the Example's code into it\n\t%s",
			b.file, b.line, where, first)
	}
	return n
}

// README.md's Go blocks are Example code: they compile, and those whose
// Example has an Output run with their output checked.
func TestReadmeGoBlocksAreExamples(t *testing.T) {
	n := checkGoBlocks(t, filepath.Join(root, "README.md"), examples(t), "any Example function")
	assert.Positive(t, n, "README.md has no Go blocks")
}

// The guides' Go blocks are Example code, or code of the example programs.
func TestDocsGoBlocksAreCode(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "no guides in docs/")
	bodies := append(examples(t), programs(t)...)
	for _, doc := range append(docs, filepath.Join(root, "RELIABILITY.md")) {
		checkGoBlocks(t, doc, bodies, "any Example function or a function of a program under examples/")
	}
}

// anchor returns GitHub's anchor for a Markdown heading's text.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of the Markdown file path.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	inBlock := false
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
		}
		if inBlock || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		text = strings.NewReplacer("`", "", "*", "").Replace(text)
		a := anchor(text)
		for i := 1; out[a]; i++ { // GitHub numbers repeated headings
			a = anchor(text) + "-" + string(rune('0'+i))
		}
		out[a] = true
	}
	return out
}

var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeLink = regexp.MustCompile(`https://github\.com/redlimit/redlimit/blob/main/([^\s"#)]+)(#[^\s"')]+)?`)
)

// checkTarget fails the test when the file target, relative to the
// repository, is missing, or when frag names no heading of it.
func checkTarget(t *testing.T, from, target, frag string) {
	t.Helper()
	info, err := os.Stat(target)
	if !assert.NoError(t, err, "%s: a link to a missing file", from) {
		return
	}
	if frag == "" || info.IsDir() {
		return
	}
	assert.True(t, anchors(t, target)[frag], "%s: a link to #%s, a heading that %s does not have", from, frag, target)
}

// The documents link to files and headings that exist.
func TestDocumentLinks(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, doc := range append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "RELIABILITY.md")) {
		src, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range mdLink.FindAllStringSubmatch(string(src), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(link, "#")
			target := doc
			if path != "" {
				target = filepath.Join(filepath.Dir(doc), path)
			}
			checkTarget(t, doc+": "+link, target, frag)
		}
	}
}

// The links to the documents that the code hands out, such as the type of
// a problem+json body, lead to headings that exist.
func TestCodeLinksToDocuments(t *testing.T) {
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range codeLink.FindAllStringSubmatch(string(src), -1) {
			n++
			checkTarget(t, path+": "+m[0], filepath.Join(root, m[1]), strings.TrimPrefix(m[2], "#"))
		}
		return nil
	})
	require.NoError(t, err)
	assert.Positive(t, n, "no links to the documents in the code")
}

// testName is a test named in a document, in backquotes; a trailing '*'
// stands for every test whose name begins so.
var testName = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)(\\*?)`")

// The tests that the documents cite as evidence exist.
func TestDocumentsNameExistingTests(t *testing.T) {
	names := funcNames(t)
	require.NotEmpty(t, names)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	cited := 0
	for _, doc := range append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "RELIABILITY.md")) {
		src, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range testName.FindAllStringSubmatch(string(src), -1) {
			cited++
			found := false
			for _, n := range names {
				if n == m[1] || m[2] == "*" && strings.HasPrefix(n, m[1]) {
					found = true
					break
				}
			}
			assert.True(t, found, "%s cites %s%s, which no test function is", doc, m[1], m[2])
		}
	}
	assert.Positive(t, cited, "no tests cited")
}

// funcNames returns the names of the test functions of the repository.
func funcNames(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Logf("skipped: %v", err)
			return nil
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				names = append(names, fn.Name.Name)
			}
		}
		return nil
	})
	require.NoError(t, err)
	return names
}

// TestOnePackageComment: each package's documentation is the comment of
// one file (its doc.go, or its only file), so that no comment meant for a
// file's contents shows up as the package's documentation.
func TestOnePackageComment(t *testing.T) {
	documented := map[string][]string{} // package directory -> files with a package comment
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Doc != nil {
			dir := filepath.Dir(path)
			documented[dir] = append(documented[dir], filepath.Base(path))
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, documented)
	for dir, files := range documented {
		assert.Len(t, files, 1, "%s: package comments in %v; keep one (doc.go), and detach the others from the package clause", dir, files)
	}
}
