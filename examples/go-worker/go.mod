module github.com/shardcron/shardcron/examples/go-worker

go 1.26.0

require (
	github.com/shardcron/shardcron/gen/go v0.0.0-00010101000000-000000000000
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

// The stubs are generated from ../../proto by ../test-clients.sh (or the command in
// README.md) into ./gen, which is not committed.
replace github.com/shardcron/shardcron/gen/go => ./gen
