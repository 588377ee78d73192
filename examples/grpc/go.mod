module github.com/redlimit/redlimit/examples/grpc

go 1.25.0

replace github.com/redlimit/redlimit => ../../

replace github.com/redlimit/redlimit/grpcrl => ../../grpcrl

require (
	github.com/redis/go-redis/v9 v9.22.0
	github.com/redlimit/redlimit v0.1.0
	github.com/redlimit/redlimit/grpcrl v0.1.0
	github.com/stretchr/testify v1.12.1
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260819154853-08b0e4226688
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)
