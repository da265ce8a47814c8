package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// TestDockerfile checks the image recipe with buildkit's own parser:
// multi-stage, a static build, a distroless non-root final stage without a
// shell, and every base image pinned to a tag other than latest.
func TestDockerfile(t *testing.T) {
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a final one", len(stages))
	}
	for _, s := range stages {
		img := s.BaseName
		_, tag, ok := strings.Cut(img[strings.LastIndex(img, "/")+1:], ":")
		if !ok || tag == "" || tag == "latest" {
			t.Errorf("stage %q: base image %s is not pinned to a tag (or is latest)", s.Name, img)
		}
	}
	build, final := stages[0], stages[len(stages)-1]
	built := false
	for _, cmd := range build.Commands {
		if run, ok := cmd.(*instructions.RunCommand); ok {
			line := strings.Join(run.CmdLine, " ")
			if strings.Contains(line, "go build") {
				built = true
				for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w", "-X main.version="} {
					if !strings.Contains(line, want) {
						t.Errorf("go build lacks %q: %s", want, line)
					}
				}
			}
		}
	}
	if !built {
		t.Error("the build stage has no go build")
	}

	if !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") || !strings.HasSuffix(final.BaseName, ":nonroot") {
		t.Errorf("final stage is %s, want gcr.io/distroless/static...:nonroot", final.BaseName)
	}
	var user string
	var entrypoint []string
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Error("ENTRYPOINT in shell form: the final image has no shell")
			}
			entrypoint = c.CmdLine
		case *instructions.CmdCommand:
			if c.PrependShell {
				t.Error("CMD in shell form: the final image has no shell")
			}
		case *instructions.RunCommand:
			t.Errorf("RUN in the final stage (%v): it has no shell", c.CmdLine)
		case *instructions.CopyCommand:
			if c.From != build.Name {
				t.Errorf("final stage copies from %q, want the build stage %q", c.From, build.Name)
			}
		}
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("final stage USER = %q, want a non-root uid", user)
	}
	if len(entrypoint) != 1 || entrypoint[0] != "/haproxy-k8s-sync" {
		t.Errorf("ENTRYPOINT = %v", entrypoint)
	}
}
