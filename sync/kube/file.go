package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// FileSource reads the objects from YAML or JSON manifests instead of an API
// server: a file, or every .yaml, .yml and .json file of a directory, with
// several documents per file and List objects such as `kubectl get -o yaml`
// writes. Objects of other kinds are ignored. The same selection rules as
// Source apply (namespace, service-name label).
type FileSource struct {
	Path      string
	Namespace string
	Service   string
	Nodes     bool
}

// Read decodes the manifests again on every call, so edits are picked up.
func (f *FileSource) Read(context.Context) (desired.Input, error) {
	objs, err := readManifests(f.Path)
	if err != nil {
		return desired.Input{}, err
	}
	var in desired.Input
	for _, o := range objs {
		f.keep(&in, o)
	}
	if in.Service == nil {
		return desired.Input{}, fmt.Errorf("service %s/%s in %s: %w", f.Namespace, f.Service, f.Path, &desired.ServiceNotFoundError{Namespace: f.Namespace, Name: f.Service})
	}
	return in, nil
}

func (f *FileSource) keep(in *desired.Input, o runtime.Object) {
	switch x := o.(type) {
	case *corev1.Service:
		if x.Namespace == f.Namespace && x.Name == f.Service {
			in.Service = x.DeepCopy()
		}
	case *discoveryv1.EndpointSlice:
		if x.Namespace == f.Namespace && x.Labels[discoveryv1.LabelServiceName] == f.Service {
			in.Slices = append(in.Slices, *x.DeepCopy())
		}
	case *corev1.Node:
		if f.Nodes {
			in.Nodes = append(in.Nodes, *x.DeepCopy())
		}
	}
}

// FileServices lists the Services of manifests (read as FileSource reads
// them) for the many-Services modes: a ServiceLister, as the API's client
// is. A Service without a namespace is left out, as FileSource leaves it
// out (a `kubectl get -o yaml` dump always has one); of two with one
// namespace and name, the last read counts, as for FileSource.
type FileServices struct {
	Path string
}

// ListServices reads the files again on every call, so edits are picked
// up; the list is one page, sorted by namespace and name.
func (f *FileServices) ListServices(_ context.Context, namespace string, _ metav1.ListOptions) (*corev1.ServiceList, error) {
	objs, err := readManifests(f.Path)
	if err != nil {
		return nil, err
	}
	byKey := map[string]corev1.Service{}
	for _, o := range objs {
		s, ok := o.(*corev1.Service)
		if !ok || s.Namespace == "" || namespace != "" && s.Namespace != namespace {
			continue
		}
		byKey[s.Namespace+"/"+s.Name] = *s.DeepCopy()
	}
	out := &corev1.ServiceList{}
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out.Items = append(out.Items, byKey[k])
	}
	return out, nil
}

// readManifests decodes every object of the manifest files at path, in
// file order: Services, EndpointSlices and Nodes (other kinds are left
// out while decoding).
//
// The objects are decoded once per version of the files and shared by
// every caller until they change (a full reconcile of many Services reads
// them once per Service: decoded each time, a pass was quadratic in
// Services, 8.5 s for 200): callers copy what they keep.
func readManifests(path string) ([]runtime.Object, error) {
	files, err := manifestFiles(path)
	if err != nil {
		return nil, err
	}
	sig, err := filesSignature(files)
	if err != nil {
		return nil, err
	}
	decoded.Lock()
	e, ok := decoded.by[path]
	decoded.Unlock()
	if ok && e.sig == sig {
		return e.objs, nil
	}
	objs, err := decodeManifests(files)
	if err != nil {
		return nil, err
	}
	decoded.Lock()
	decoded.by[path] = decodedManifests{sig: sig, objs: objs}
	decoded.decodes++
	decoded.Unlock()
	return objs, nil
}

// decoded holds the last decode of each manifests path with the signature
// of its files (filesSignature).
var decoded = struct {
	sync.Mutex
	by       map[string]decodedManifests
	versions map[string]string // the last ManifestsVersion of each path
	decodes  int               // decodes done (tests)
}{by: map[string]decodedManifests{}, versions: map[string]string{}}

type decodedManifests struct {
	sig  string
	objs []runtime.Object
}

// filesSignature changes when a file is added, removed, renamed or written:
// its name, size and modification time, and where the system has them its
// inode and change time, which a copy that keeps the modification time
// (cp -p, a tar extract, a ConfigMap's symlink swap) changes too.
func filesSignature(files []string) (string, error) {
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("manifests: %w", err)
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00%s\x00", f, fi.Size(), fi.ModTime().UnixNano(), statIdentity(fi))
	}
	return b.String(), nil
}

func decodeManifests(files []string) ([]runtime.Object, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	dec := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	var out []runtime.Object
	for _, file := range files {
		objs, err := decodeFile(dec, file)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// ManifestsVersion is a digest of what FileSource reads at path (the file,
// or the manifest files of the directory): their names and contents. It
// changes when an edit, a file added or a file removed changes what a read
// would see, and not when a file is only touched; nor does it miss a file
// replaced with an older modification time (cp -p, a tar extract, a
// ConfigMap's symlink swap), which a check of modification times would.
func ManifestsVersion(path string) (string, error) {
	files, err := manifestFiles(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("manifests: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(data))
		h.Write(data)
	}
	v := hex.EncodeToString(h.Sum(nil))
	// A change of contents the files' signature missed (a rewrite of the
	// same size within one tick of a coarse clock) is decoded again all
	// the same: the reconcile this version triggers reads it.
	decoded.Lock()
	if decoded.versions[path] != v {
		decoded.versions[path] = v
		delete(decoded.by, path)
	}
	decoded.Unlock()
	return v, nil
}

func manifestFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	var out []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				out = append(out, filepath.Join(path, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// decodeFile returns the objects of every document in file, Lists flattened.
func decodeFile(dec runtime.Decoder, file string) ([]runtime.Object, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	reader := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []runtime.Object
	for i := 1; ; i++ {
		var raw runtime.RawExtension
		if err := reader.Decode(&raw); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 || string(bytes.TrimSpace(raw.Raw)) == "null" {
			continue
		}
		objs, err := decodeObject(dec, raw.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		out = append(out, objs...)
	}
}

func decodeObject(dec runtime.Decoder, raw []byte) ([]runtime.Object, error) {
	obj, _, err := dec.Decode(raw, nil, nil)
	if runtime.IsNotRegisteredError(err) {
		return nil, nil // a kind we do not read, e.g. a Pod in a dump
	}
	if err != nil {
		return nil, err
	}
	list, ok := obj.(*corev1.List)
	if !ok {
		return []runtime.Object{obj}, nil
	}
	var out []runtime.Object
	for _, item := range list.Items {
		objs, err := decodeObject(dec, item.Raw)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}
