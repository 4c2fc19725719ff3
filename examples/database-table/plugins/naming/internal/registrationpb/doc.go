// Package registrationpb holds the messages and gRPC client of
// cnpgi.registration.v1 (proto/registration/v1/registration.proto in the
// cnpgi-rs repository): how a plugin registers itself with a cnpgi-rs
// operator and keeps its lease. Generated: do not edit, run go generate.
package registrationpb

//go:generate bash ../../generate.sh
