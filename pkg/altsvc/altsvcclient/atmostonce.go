package altsvcclient

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
	k8sjson "sigs.k8s.io/json"
)

// AtMostOnce tells whether a write to an API server's own resources (not
// through a proxy: path is the request's), if sent again, still takes
// effect at most once in all: an update (PUT) whose object names the resourceVersion
// it replaces, or a delete (DELETE) whose options carry a resourceVersion
// or uid precondition. The API server carries either out only while the
// object is at that resourceVersion (has that uid), and after any write it
// never is again: resourceVersions only grow, and uids are not reused. So
// a copy sent to a second server after the first may have acted on it
// either fails there or takes the place of the first. body is the
// request's body and contentType its Content-Type: JSON, read as the API
// server reads it (field names case-sensitive), or Kubernetes' protobuf
// (client-go's default for built-in types). An aggregated API server is
// trusted to keep preconditions as the generic registry does.
func AtMostOnce(method, path, contentType string, body []byte) bool {
	if !MayLearnFrom(path) {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch mt {
	case "application/json":
	case runtime.ContentTypeProtobuf:
		return protobufAtMostOnce(method, body)
	default:
		return false
	}
	switch method {
	case http.MethodPut:
		var obj struct {
			Metadata struct {
				ResourceVersion *string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if k8sjson.UnmarshalCaseSensitivePreserveInts(body, &obj) != nil || obj.Metadata.ResourceVersion == nil {
			return false
		}
		return conditionalUpdate(*obj.Metadata.ResourceVersion)
	case http.MethodDelete:
		var opts struct {
			Preconditions *struct {
				ResourceVersion *string `json:"resourceVersion"`
				UID             *string `json:"uid"`
			} `json:"preconditions"`
		}
		if k8sjson.UnmarshalCaseSensitivePreserveInts(body, &opts) != nil || opts.Preconditions == nil {
			return false
		}
		p := opts.Preconditions
		return (p.ResourceVersion != nil && *p.ResourceVersion != "") || (p.UID != nil && *p.UID != "")
	}
	return false
}

// conditionalUpdate tells whether an update's resourceVersion makes it
// conditional, as the API server reads it (APIObjectVersioner): a number
// other than 0 ("", "0", "00" ask for an unconditional update).
func conditionalUpdate(rv string) bool {
	n, err := strconv.ParseUint(rv, 10, 64)
	return err == nil && n != 0
}

// Field numbers of the protobuf messages protobufAtMostOnce reads, as
// k8s.io/api's generated.proto give them. Every top-level object has its
// ObjectMeta as field 1.
const (
	objectMetadataField          = 1 // <Kind>.metadata
	metaResourceVersionField     = 6 // ObjectMeta.resourceVersion
	deleteOptionsPreconditions   = 2 // DeleteOptions.preconditions
	preconditionsUIDField        = 1 // Preconditions.uid
	preconditionsResourceVersion = 2 // Preconditions.resourceVersion
)

// protobufMagic opens every Kubernetes protobuf body.
var protobufMagic = []byte("k8s\x00")

// protobufAtMostOnce is AtMostOnce of a body in Kubernetes' protobuf
// encoding: the magic, then a runtime.Unknown whose Raw is the object.
func protobufAtMostOnce(method string, body []byte) bool {
	if !bytes.HasPrefix(body, protobufMagic) {
		return false
	}
	var u runtime.Unknown
	if err := u.Unmarshal(body[len(protobufMagic):]); err != nil {
		return false
	}
	if u.ContentEncoding != "" {
		return false // compressed: not read
	}
	switch method {
	case http.MethodPut:
		return conditionalUpdate(string(protoField(protoField(u.Raw, objectMetadataField), metaResourceVersionField)))
	case http.MethodDelete:
		p := protoField(u.Raw, deleteOptionsPreconditions)
		return len(protoField(p, preconditionsResourceVersion)) > 0 || len(protoField(p, preconditionsUIDField)) > 0
	}
	return false
}

// protoField is the value of the last length-delimited field num of the
// protobuf message msg (nil when it is absent or msg is malformed), as
// protobuf decoders take the last of a repeated scalar field.
func protoField(msg []byte, num protowire.Number) []byte {
	var found []byte
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
		if typ == protowire.BytesType && n == num {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil
			}
			found = v
			msg = msg[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
	}
	return found
}

// maxAtMostOnceBody is the largest body AtMostOnce is asked about: above
// what etcd stores in one key (1.5 MiB by default).
const maxAtMostOnceBody = 4 << 20

// atMostOnce is AtMostOnce of req, whose body it reads from GetBody.
func atMostOnce(req *http.Request) bool {
	if req.Method != http.MethodPut && req.Method != http.MethodDelete || req.GetBody == nil {
		return false
	}
	rc, err := req.GetBody()
	if err != nil {
		return false
	}
	defer rc.Close()
	body, err := io.ReadAll(io.LimitReader(rc, maxAtMostOnceBody+1))
	if err != nil || len(body) > maxAtMostOnceBody {
		return false
	}
	return AtMostOnce(req.Method, req.URL.Path, req.Header.Get("Content-Type"), body)
}
