package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoExportedMutableState: no package exports a variable holding a slice or a map (another package could
// change what every user of it sees); a list others read is a function returning a copy. Exported variables
// of other kinds (sentinel errors, an embed.FS, a sync.OnceFunc) are not state anyone can change.
func TestNoExportedMutableState(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "../.." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "deploy" || name == "python") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() {
						continue
					}
					if mutable(vs.Type) || (i < len(vs.Values) && mutableValue(vs.Values[i])) {
						t.Errorf("%s: exported variable %s holds a slice or a map: make it a function returning a copy, or unexport it",
							fset.Position(name.Pos()), name.Name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files; want the whole module", files)
	}
}

func mutable(typ ast.Expr) bool {
	switch typ.(type) {
	case *ast.ArrayType, *ast.MapType:
		return true
	}
	return false
}

func mutableValue(v ast.Expr) bool {
	switch v := v.(type) {
	case *ast.CompositeLit:
		return mutable(v.Type)
	case *ast.CallExpr:
		if id, ok := v.Fun.(*ast.Ident); ok && id.Name == "make" && len(v.Args) > 0 {
			return mutable(v.Args[0])
		}
	}
	return false
}
