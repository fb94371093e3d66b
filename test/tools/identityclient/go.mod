// The client of Linkerd's identity API the bed records the real identity controller with. A
// module of its own, so that the product's module does not depend on gRPC.
module github.com/linkerd/trust-rotation/test/tools/identityclient

go 1.26.0

require (
	github.com/linkerd/linkerd2-proxy-api v0.20.0
	google.golang.org/grpc v1.83.0
)

require (
	github.com/golang/protobuf v1.5.4 // indirect
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.37.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
