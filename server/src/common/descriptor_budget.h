#pragma once
// How the process's open-file limit is shared between its ports: a reserve no connection may take
// (model files, libraries that open files while serving), and for REST a share of the rest, so that
// REST connections alone can never exhaust the descriptors gRPC and /metrics need (issue #43.3), nor
// drive libmicrohttpd into accepting against EMFILE. Pure functions of the limit; thread-safe.
namespace graphserve {

// The process's soft RLIMIT_NOFILE (2^20 when unlimited or unreadable).
int OpenFileLimit();
// Descriptors kept out of every connection's reach under `limit`.
int DescriptorReserve(int limit);
// The REST port's connection cap under `limit`: `wanted`, but at most half of what the reserve
// leaves (the other half is gRPC's and /metrics'), and never below 8.
int RestConnectionCap(int limit, int wanted);
// The /metrics port's connection cap under `limit`: `wanted`, but at most an eighth of what the
// reserve leaves (a scrape needs one connection; the rest is gRPC's) unless that is below 4. The port may
// hold twice this many descriptors while the sockets it dropped close (connection_gate.h).
int MetricsConnectionCap(int limit, int wanted);
// The gRPC connections one client address may have open under `limit`: `wanted` (0: no cap), but at
// most a quarter of the descriptors that REST's and /metrics' largest shares leave to gRPC, and never
// below 1, so that one client cannot take gRPC's descriptors from every other.
int GrpcConnectionsPerAddressCap(int limit, int wanted);
// /metrics' own reserve: its connections may take descriptors numbered up to this, half of the
// process's reserve above where gRPC and REST stop, so that a scrape still gets a descriptor once
// their connections have taken all theirs. The port's cap bounds how many it takes.
int MetricsHighestDescriptor(int limit);

}  // namespace graphserve
