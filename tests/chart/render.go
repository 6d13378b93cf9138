// inplace-chart-render: renders a Helm chart the way `helm template` does, for a test
// machine without Helm: Go's text/template with Sprig (Debian's
// golang-github-masterminds-sprig-dev) plus the functions Helm adds (include, tpl, toYaml,
// fromYaml, toJson, fromJson, required, lookup), Helm's built-in objects (.Values merged
// from the chart's values.yaml and -f/--set, .Release, .Chart, .Capabilities, .Template) and
// its rules (files starting with "_" are partials, "<no value>" renders empty, crds/ is not
// templated). It also compares two rendered streams as Kubernetes objects.
//
//	inplace-chart-render render CHART --release NAME --namespace NS [--kube-version 1.MINOR] [-f VALUES]... [--set PATH=VALUE]...
//	inplace-chart-render compare [--ignore-label KEY]... [--skip-kind KIND]... WANT.yaml GOT.yaml
//
// compare prints every object missing on either side and every field that differs, and
// exits 1 if there is any; labels named by --ignore-label are dropped on both sides first,
// wherever they appear (labels, selectors), and objects of a --skip-kind are not compared.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"gopkg.in/yaml.v2"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "render":
		err = renderCmd(os.Args[2:])
	case "compare":
		var differ bool
		differ, err = compareCmd(os.Args[2:])
		if err == nil && differ {
			os.Exit(1)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inplace-chart-render:", err)
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: inplace-chart-render render CHART --release NAME --namespace NS [--kube-version 1.MINOR] [-f VALUES]... [--set PATH=VALUE]...\n"+
		"       inplace-chart-render compare [--ignore-label KEY]... [--skip-kind KIND]... WANT.yaml GOT.yaml")
	os.Exit(2)
}

// ---------- values ----------

// normalize turns what yaml.v2 decodes (map[interface{}]interface{}) into JSON-like
// values (map[string]interface{}), as Helm's YAML → JSON round trip does.
func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, val := range t {
			m[fmt.Sprint(k)] = normalize(val)
		}
		return m
	case map[string]interface{}:
		for k, val := range t {
			t[k] = normalize(val)
		}
		return t
	case []interface{}:
		for i := range t {
			t[i] = normalize(t[i])
		}
		return t
	default:
		return v
	}
}

func readYAMLMap(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v interface{}
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := normalize(v).(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: not a mapping", path)
	}
	return m, nil
}

// merge puts src over dst, maps merged key by key, anything else replaced (Helm's coalescing
// of user values over chart defaults; a null removes the key).
func merge(dst, src map[string]interface{}) map[string]interface{} {
	for k, sv := range src {
		if sv == nil {
			delete(dst, k)
			continue
		}
		sm, sok := sv.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			dst[k] = merge(dm, sm)
		} else {
			dst[k] = sv
		}
	}
	return dst
}

// setValue applies one --set PATH=VALUE (dotted path; true/false/null/integers typed as
// Helm's --set types them, anything else a string).
func setValue(values map[string]interface{}, expr string) error {
	eq := strings.IndexByte(expr, '=')
	if eq <= 0 {
		return fmt.Errorf("--set %q: want PATH=VALUE", expr)
	}
	path, raw := strings.Split(expr[:eq], "."), expr[eq+1:]
	var val interface{} = raw
	switch raw {
	case "true":
		val = true
	case "false":
		val = false
	case "null":
		val = nil
	default:
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
			val = n
		}
	}
	m := values
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[p] = next
		}
		m = next
	}
	last := path[len(path)-1]
	if val == nil {
		delete(m, last)
	} else {
		m[last] = val
	}
	return nil
}

// ---------- rendering ----------

type apiVersions []string

// Has is .Capabilities.APIVersions.Has.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(s string) map[string]interface{} {
	var v interface{}
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	m, _ := normalize(v).(map[string]interface{})
	return m
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func renderCmd(args []string) error {
	var chart, release, namespace string
	kubeVersion := "1.33"
	var valueFiles, sets []string
	for i := 0; i < len(args); i++ {
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", args[i])
			}
			i++
			return args[i], nil
		}
		var err error
		switch args[i] {
		case "--release":
			release, err = next()
		case "--namespace", "-n":
			namespace, err = next()
		case "--kube-version":
			kubeVersion, err = next()
		case "-f", "--values":
			var f string
			f, err = next()
			valueFiles = append(valueFiles, f)
		case "--set":
			var s string
			s, err = next()
			sets = append(sets, s)
		default:
			if strings.HasPrefix(args[i], "-") || chart != "" {
				return fmt.Errorf("unexpected argument %q", args[i])
			}
			chart = args[i]
		}
		if err != nil {
			return err
		}
	}
	if chart == "" || release == "" || namespace == "" {
		return errors.New("render needs CHART, --release and --namespace")
	}
	out, err := render(chart, release, namespace, kubeVersion, valueFiles, sets)
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(out)
	return err
}

// capabilities is .Capabilities of a server of version 1.MINOR: the API versions this
// chart asks about.
func capabilities(kubeVersion string) (map[string]interface{}, error) {
	parts := strings.SplitN(strings.TrimPrefix(kubeVersion, "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "1" {
		return nil, fmt.Errorf("--kube-version %q: want 1.MINOR", kubeVersion)
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil {
		return nil, fmt.Errorf("--kube-version %q: %w", kubeVersion, err)
	}
	apis := apiVersions{"v1", "apps/v1", "rbac.authorization.k8s.io/v1", "apiextensions.k8s.io/v1", "coordination.k8s.io/v1"}
	if minor >= 21 {
		apis = append(apis, "policy/v1")
	}
	if minor < 25 {
		apis = append(apis, "policy/v1beta1")
	}
	v := fmt.Sprintf("v1.%d.0", minor)
	return map[string]interface{}{
		"KubeVersion": map[string]interface{}{"Version": v, "GitVersion": v, "Major": "1", "Minor": strconv.Itoa(minor)},
		"APIVersions": apis,
	}, nil
}

func render(chartDir, release, namespace, kubeVersion string, valueFiles, sets []string) (string, error) {
	caps, err := capabilities(kubeVersion)
	if err != nil {
		return "", err
	}
	meta, err := readYAMLMap(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	values, err := readYAMLMap(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range valueFiles {
		user, err := readYAMLMap(f)
		if err != nil {
			return "", err
		}
		values = merge(values, user)
	}
	for _, s := range sets {
		if err := setValue(values, s); err != nil {
			return "", err
		}
	}
	chartObj := map[string]interface{}{}
	for k, v := range meta {
		// Helm's .Chart fields are the Chart.yaml keys, capitalised (appVersion → AppVersion).
		chartObj[strings.ToUpper(k[:1])+k[1:]] = v
	}
	top := map[string]interface{}{
		"Values": values,
		"Chart":  chartObj,
		"Release": map[string]interface{}{
			"Name": release, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Capabilities": caps,
	}

	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	root := template.New("gotpl")
	funcs := sprig.TxtFuncMap()
	// Helm removes these two (no environment in a chart).
	delete(funcs, "env")
	delete(funcs, "expandenv")
	includeDepth := 0
	funcs["include"] = func(name string, data interface{}) (string, error) {
		includeDepth++
		defer func() { includeDepth-- }()
		if includeDepth > 100 {
			return "", fmt.Errorf("include %q: too deep", name)
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = toJSON
	funcs["fromJson"] = fromJSON
	funcs["lookup"] = func(string, string, string, string) map[string]interface{} { return map[string]interface{}{} }
	root.Funcs(funcs).Option("missingkey=zero")

	var renderable []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		name := filepath.Base(f)
		if _, err := root.New(name).Parse(string(data)); err != nil {
			return "", err
		}
		if !strings.HasPrefix(name, "_") && name != "NOTES.txt" {
			renderable = append(renderable, name)
		}
	}
	var out strings.Builder
	for _, name := range renderable {
		tplTop := map[string]interface{}{}
		for k, v := range top {
			tplTop[k] = v
		}
		tplTop["Template"] = map[string]interface{}{"Name": filepath.Join(filepath.Base(chartDir), "templates", name), "BasePath": filepath.Join(filepath.Base(chartDir), "templates")}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, tplTop); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		for _, doc := range splitDocs(text) {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", tplTop["Template"].(map[string]interface{})["Name"], doc)
		}
	}
	return out.String(), nil
}

// splitDocs splits a YAML stream at "---" lines and drops documents that are empty or
// only comments (as Helm does).
func splitDocs(text string) []string {
	var docs []string
	var cur []string
	flush := func() {
		doc := strings.TrimSpace(strings.Join(cur, "\n"))
		cur = nil
		empty := true
		for _, l := range strings.Split(doc, "\n") {
			t := strings.TrimSpace(l)
			if t != "" && !strings.HasPrefix(t, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, doc)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimRight(line, " ") == "---" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return docs
}

// ---------- comparing ----------

type object = map[string]interface{}

func readObjects(path string) ([]object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []object
	for _, doc := range splitDocs(string(data)) {
		var v interface{}
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", path, err, doc)
		}
		o, ok := normalize(v).(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("%s: a document is not a mapping:\n%s", path, doc)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

func str(o object, path ...string) string {
	var cur interface{} = o
	for _, p := range path {
		m, ok := cur.(map[string]interface{})
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

func key(o object) string {
	return fmt.Sprintf("%s %s/%s", str(o, "kind"), str(o, "metadata", "namespace"), str(o, "metadata", "name"))
}

// dropLabels removes the keys in ignore from every map named labels, matchLabels or
// annotations (and from every map below a labelSelector/selector), then drops maps that
// became empty.
func dropLabels(v interface{}, ignore map[string]bool) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, val := range t {
			if ignore[k] {
				delete(t, k)
				continue
			}
			t[k] = dropLabels(val, ignore)
			if m, ok := t[k].(map[string]interface{}); ok && len(m) == 0 && (k == "labels" || k == "annotations") {
				delete(t, k)
			}
		}
		return t
	case []interface{}:
		for i := range t {
			t[i] = dropLabels(t[i], ignore)
		}
		return t
	default:
		return v
	}
}

func diff(path string, want, got interface{}, out *[]string) {
	if reflect.DeepEqual(want, got) {
		return
	}
	wm, wok := want.(map[string]interface{})
	gm, gok := got.(map[string]interface{})
	if wok && gok {
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		var sorted []string
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			diff(path+"."+k, wm[k], gm[k], out)
		}
		return
	}
	wl, wlok := want.([]interface{})
	gl, glok := got.([]interface{})
	if wlok && glok && len(wl) == len(gl) {
		for i := range wl {
			diff(fmt.Sprintf("%s[%d]", path, i), wl[i], gl[i], out)
		}
		return
	}
	*out = append(*out, fmt.Sprintf("  %s: want %s, got %s", path, toJSON(want), toJSON(got)))
}

func compareCmd(args []string) (bool, error) {
	ignore := map[string]bool{}
	skip := map[string]bool{}
	var files []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--ignore-label", "--skip-kind":
			if i+1 >= len(args) {
				return false, fmt.Errorf("%s needs a value", args[i])
			}
			if args[i] == "--ignore-label" {
				ignore[args[i+1]] = true
			} else {
				skip[args[i+1]] = true
			}
			i++
		default:
			files = append(files, args[i])
		}
	}
	if len(files) != 2 {
		return false, errors.New("compare needs WANT.yaml and GOT.yaml")
	}
	sides := [2]map[string]object{}
	for i, f := range files {
		objs, err := readObjects(f)
		if err != nil {
			return false, err
		}
		sides[i] = map[string]object{}
		for _, o := range objs {
			if skip[str(o, "kind")] {
				continue
			}
			k := key(o)
			if _, dup := sides[i][k]; dup {
				return false, fmt.Errorf("%s: %s twice", f, k)
			}
			sides[i][k] = dropLabels(o, ignore).(map[string]interface{})
		}
	}
	var keys []string
	for k := range sides[0] {
		keys = append(keys, k)
	}
	for k := range sides[1] {
		if _, ok := sides[0][k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	differ := false
	for _, k := range keys {
		w, wok := sides[0][k]
		g, gok := sides[1][k]
		switch {
		case !gok:
			fmt.Printf("only in %s: %s\n", files[0], k)
			differ = true
		case !wok:
			fmt.Printf("only in %s: %s\n", files[1], k)
			differ = true
		default:
			var lines []string
			diff("", w, g, &lines)
			if len(lines) > 0 {
				differ = true
				fmt.Printf("%s differs:\n%s\n", k, strings.Join(lines, "\n"))
			}
		}
	}
	if !differ {
		fmt.Printf("%d objects equal\n", len(keys))
	}
	return differ, nil
}
