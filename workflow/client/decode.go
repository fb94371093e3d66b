package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// A TrustAnchorRotation the apiserver accepted can still hold a value Go cannot: its schema
// checks the form of a duration, not that it fits a time.Duration, and an object stored under
// an older CRD was checked by older rules. Decoded strictly, such an object fails the whole
// response it is in: a list, a watch, and so every informer over TrustAnchorRotations, the other
// objects included. The client decodes them tolerantly instead: a field that does not decode is
// left at its zero value and named, with the error, in the in-memory annotation
// v1alpha1.AnnotationDecodeErrors (DecodeErrors reads it), and the rest of the object decodes as
// usual. The annotation is never written back: the client writes only status (the status
// subresource keeps the stored metadata) and merge patches of single spec fields.

// DecodeErrors returns the fields of tar that did not decode, as the client found them; nil when
// every field decoded.
func DecodeErrors(tar *v1alpha1.TrustAnchorRotation) field.ErrorList {
	raw := tar.Annotations[v1alpha1.AnnotationDecodeErrors]
	if raw == "" {
		return nil
	}
	var found []decodeError
	if err := json.Unmarshal([]byte(raw), &found); err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("metadata", "annotations").Key(v1alpha1.AnnotationDecodeErrors), err)}
	}
	errs := make(field.ErrorList, 0, len(found))
	for _, e := range found {
		errs = append(errs, field.Invalid(parsePath(e.Field), e.Value, e.Detail))
	}
	return errs
}

// decodeError is one field that did not decode, as the annotation holds it.
type decodeError struct {
	Field  string `json:"field"`
	Value  string `json:"value"`
	Detail string `json:"detail"`
}

// parsePath turns a path as field.Path prints it back into one; DecodeErrors only prints it.
func parsePath(p string) *field.Path {
	parts := strings.Split(p, ".")
	return field.NewPath(parts[0], parts[1:]...)
}

// decodeRotation decodes one TrustAnchorRotation tolerantly (see the file's comment). It fails
// only when the object's metadata does not decode: without it the object cannot be named.
func decodeRotation(data []byte) (*v1alpha1.TrustAnchorRotation, error) {
	tar := &v1alpha1.TrustAnchorRotation{}
	errs := decodeTolerant(data, reflect.ValueOf(tar).Elem(), nil)
	for _, e := range errs {
		if strings.HasPrefix(e.Field, "metadata") || strings.HasPrefix(e.Field, "apiVersion") || strings.HasPrefix(e.Field, "kind") {
			return nil, fmt.Errorf("decoding TrustAnchorRotation: %s", e.Error())
		}
	}
	// A map's members come in no order: sorted, the same object always reads the same.
	slices.SortStableFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	markDecodeErrors(tar, errs)
	return tar, nil
}

// markDecodeErrors sets, or removes, the annotation that carries errs: a value a user set in
// the stored object never passes for the client's own finding.
func markDecodeErrors(tar *v1alpha1.TrustAnchorRotation, errs field.ErrorList) {
	if len(errs) == 0 {
		if _, ok := tar.Annotations[v1alpha1.AnnotationDecodeErrors]; ok {
			delete(tar.Annotations, v1alpha1.AnnotationDecodeErrors)
		}
		return
	}
	found := make([]decodeError, 0, len(errs))
	for _, e := range errs {
		found = append(found, decodeError{Field: e.Field, Value: fmt.Sprint(e.BadValue), Detail: e.Detail})
	}
	raw, _ := json.Marshal(found)
	if tar.Annotations == nil {
		tar.Annotations = map[string]string{}
	}
	tar.Annotations[v1alpha1.AnnotationDecodeErrors] = string(raw)
}

// decodeRotationList decodes a list item by item, each tolerantly.
func decodeRotationList(data []byte) (*v1alpha1.TrustAnchorRotationList, error) {
	var raw struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ListMeta   `json:"metadata"`
		Items           []json.RawMessage `json:"items"`
	}
	if err := utiljson.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("decoding TrustAnchorRotationList: %w", err)
	}
	list := &v1alpha1.TrustAnchorRotationList{TypeMeta: raw.TypeMeta, ListMeta: raw.Metadata}
	for _, item := range raw.Items {
		tar, err := decodeRotation(item)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *tar)
	}
	return list, nil
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// decodeTolerant decodes data into v as the apiserver's codec does (sigs.k8s.io/json: case
// sensitive, integers kept), and where that fails, field by field: an object's members and a
// list's items are decoded one at a time, so that the failure is pinned to the smallest field
// that holds it, which is left at its zero value and returned. A value with its own decoding
// (json.Unmarshaler: a duration, a time, a quantity) is a leaf.
func decodeTolerant(data []byte, v reflect.Value, path *field.Path) field.ErrorList {
	err := utiljson.Unmarshal(data, v.Addr().Interface())
	switch {
	case err == nil:
		return nil
	case bytes.Equal(bytes.TrimSpace(data), []byte("null")) || reflect.PointerTo(v.Type()).Implements(jsonUnmarshaler):
		return leafError(data, v, path, err)
	}
	switch v.Kind() {
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		errs := decodeTolerant(data, elem.Elem(), path)
		if len(errs) == 1 && errs[0].Field == pathString(path) {
			v.Set(reflect.Zero(v.Type())) // the pointed-to value failed whole: left unset
			return errs
		}
		v.Set(elem)
		return errs
	case reflect.Struct:
		var members map[string]json.RawMessage
		if utiljson.Unmarshal(data, &members) != nil {
			return leafError(data, v, path, err)
		}
		return decodeMembers(members, v, path)
	case reflect.Slice:
		var items []json.RawMessage
		if utiljson.Unmarshal(data, &items) != nil {
			return leafError(data, v, path, err)
		}
		out := reflect.MakeSlice(v.Type(), len(items), len(items))
		var errs field.ErrorList
		for i, item := range items {
			errs = append(errs, decodeTolerant(item, out.Index(i), path.Index(i))...)
		}
		v.Set(out)
		return errs
	case reflect.Map:
		var members map[string]json.RawMessage
		if v.Type().Key().Kind() != reflect.String || utiljson.Unmarshal(data, &members) != nil {
			return leafError(data, v, path, err)
		}
		out := reflect.MakeMapWithSize(v.Type(), len(members))
		var errs field.ErrorList
		for k, raw := range members {
			elem := reflect.New(v.Type().Elem()).Elem()
			errs = append(errs, decodeTolerant(raw, elem, path.Key(k))...)
			out.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), elem)
		}
		v.Set(out)
		return errs
	}
	return leafError(data, v, path, err)
}

// decodeMembers decodes an object's members into the struct v one by one, inlined structs
// (metav1.TypeMeta) included; a member no field names is dropped, as the codec drops it.
func decodeMembers(members map[string]json.RawMessage, v reflect.Value, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && (strings.Contains(opts, "inline") || f.Anonymous) && f.Type.Kind() == reflect.Struct {
			errs = append(errs, decodeMembers(members, v.Field(i), path)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		raw, ok := members[name]
		if !ok {
			continue
		}
		errs = append(errs, decodeTolerant(raw, v.Field(i), childPath(path, name))...)
	}
	return errs
}

func pathString(path *field.Path) string {
	if path == nil {
		return "<object>"
	}
	return path.String()
}

func childPath(path *field.Path, name string) *field.Path {
	if path == nil {
		return field.NewPath(name)
	}
	return path.Child(name)
}

// leafError leaves v at its zero value and names the field, its value and why it failed.
func leafError(data []byte, v reflect.Value, path *field.Path, err error) field.ErrorList {
	v.Set(reflect.Zero(v.Type()))
	value := string(bytes.TrimSpace(data))
	var s string
	if json.Unmarshal(data, &s) == nil {
		value = s
	}
	return field.ErrorList{field.Invalid(field.NewPath(pathString(path)), value, "cannot be decoded: "+err.Error())}
}

// tolerantSerializer is the JSON serializer of the client's codecs, with TrustAnchorRotations
// and their lists decoded tolerantly when the strict decoding fails.
type tolerantSerializer struct{ runtime.Serializer }

func (s tolerantSerializer) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, got, err := s.Serializer.Decode(data, gvk, into)
	if err == nil {
		return obj, got, nil
	}
	var tm metav1.TypeMeta
	if utiljson.Unmarshal(data, &tm) != nil || tm.GroupVersionKind().GroupVersion() != v1alpha1.SchemeGroupVersion {
		return obj, got, err
	}
	found := tm.GroupVersionKind()
	switch tm.Kind {
	case v1alpha1.Kind:
		tar, derr := decodeRotation(data)
		if derr != nil {
			return nil, got, derr
		}
		return into1(tar, into), &found, nil
	case v1alpha1.Kind + "List":
		list, derr := decodeRotationList(data)
		if derr != nil {
			return nil, got, derr
		}
		return into1(list, into), &found, nil
	}
	return obj, got, err
}

// into1 copies obj into into when the caller passed one of the same type, as a codec does.
func into1[T runtime.Object](obj T, into runtime.Object) runtime.Object {
	if dst, ok := into.(T); ok && reflect.ValueOf(dst).Kind() == reflect.Pointer && !reflect.ValueOf(dst).IsNil() {
		reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(obj).Elem())
		return dst
	}
	return obj
}

// tolerantCodecs is a NegotiatedSerializer whose serializers decode as tolerantSerializer does.
type tolerantCodecs struct{ runtime.NegotiatedSerializer }

func (t tolerantCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := t.NegotiatedSerializer.SupportedMediaTypes()
	out := make([]runtime.SerializerInfo, len(infos))
	for i, info := range infos {
		if info.MediaType == runtime.ContentTypeJSON {
			info.Serializer = tolerantSerializer{info.Serializer}
		}
		out[i] = info
	}
	return out
}
