// Package registration registers the plugin with a cnpgi-rs operator and
// keeps its lease: the plugin side of cnpgi.registration.v1
// (proto/registration/v1/registration.proto in the cnpgi-rs repository), a
// service of cnpgi-rs, not of CNPG-I (CloudNativePG has no such endpoint).
//
// The loop, the Rust SDK's (cnpgi_pluginhelper::registration) and the
// Python plugin's, with a deadline on every call:
//
//  1. Register (name, version, the address the operator dials) over mutual
//     TLS 1.3: the client certificate must name the plugin (a DNS name equal
//     to the plugin name) and be trusted by the operator; the operator's
//     certificate must chain to the registration CA. A failure is retried
//     after 1 s, doubling up to 30 s (the operator may be starting, a refused
//     certificate may be rotated).
//  2. Heartbeat every interval the operator asked for (a third of its TTL).
//     A heartbeat that fails is retried sooner (1 s, doubling up to the
//     interval), so that one lost call does not cost the lease.
//  3. NOT_FOUND from a heartbeat means the operator no longer knows the
//     lease (it restarted, or forgot the plugin): register again at once.
package registration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/registrationpb"
)

// Target says where and how the plugin registers.
type Target struct {
	// Endpoint is the operator's registration endpoint, host:port.
	Endpoint string
	// CA is the PEM file of the certificate(s) the operator's registration
	// certificate must chain to.
	CA string
	// Cert is the PEM certificate the plugin presents: its DNS name is the
	// plugin name.
	Cert string
	// Key is its PEM private key.
	Key string
	// Advertise is where the operator dials the plugin, host:port (the
	// plugin's server certificate must carry the host, or ServerName).
	Advertise string
	// ServerName is the name the operator verifies in the plugin's server
	// certificate when it is not the host of Advertise (optional).
	ServerName string
}

// Timing holds the deadlines and retry delays of the loop.
type Timing struct {
	// RegisterDeadline bounds a Register: the operator probes the plugin
	// before it answers.
	RegisterDeadline time.Duration
	// HeartbeatDeadline bounds a Heartbeat (less when the interval is shorter).
	HeartbeatDeadline time.Duration
	// FirstRetry is the first wait after a failure; waits double.
	FirstRetry time.Duration
	// MaxRegisterRetry is the longest wait between two Register attempts.
	MaxRegisterRetry time.Duration
}

// DefaultTiming is the Rust SDK's: 20 s, 10 s, 1 s, 30 s.
var DefaultTiming = Timing{
	RegisterDeadline:  20 * time.Second,
	HeartbeatDeadline: 10 * time.Second,
	FirstRetry:        time.Second,
	MaxRegisterRetry:  30 * time.Second,
}

// ErrConfiguration marks the errors that retrying cannot cure: an endpoint
// that is not host:port, unreadable certificate files.
var ErrConfiguration = errors.New("cannot register")

// KeepRegistered registers the plugin name (version) with the operator of
// target and keeps its lease until ctx is done; it then returns ctx's
// error. It returns earlier only when the configuration is unusable (an
// error wrapping ErrConfiguration); an operator that does not answer, or
// refuses, is logged and tried again.
func KeepRegistered(
	ctx context.Context,
	logger logr.Logger,
	target Target,
	name, version string,
	timing Timing,
) error {
	host, _, err := net.SplitHostPort(target.Endpoint)
	if err != nil || host == "" {
		return fmt.Errorf(
			"%w: --register-with (CNPGI_REGISTER_WITH) %q: expected the operator's registration endpoint as host:port",
			ErrConfiguration, target.Endpoint)
	}
	logger = logger.WithValues("operator", target.Endpoint)
	retry := timing.FirstRetry
	for {
		// Files read at each registration: a rotated certificate is used
		// from the next one on.
		config, err := target.tlsConfig(host)
		if err != nil {
			return err
		}
		conn, err := grpc.NewClient(target.Endpoint, grpc.WithTransportCredentials(credentials.NewTLS(config)))
		if err != nil {
			return fmt.Errorf("%w: --register-with %q: %w", ErrConfiguration, target.Endpoint, err)
		}
		client := registrationpb.NewRegistrationClient(conn)
		lease, err := register(ctx, client, target, name, version, timing.RegisterDeadline)
		if err != nil {
			_ = conn.Close()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logger.Info("cannot register with the operator",
				"code", status.Code(err).String(),
				"error", status.Convert(err).Message(),
				"retryIn", retry.String())
			if !sleep(ctx, retry) {
				return ctx.Err()
			}
			retry = min(retry*2, timing.MaxRegisterRetry)
			continue
		}
		retry = timing.FirstRetry
		logger.Info("registered with the operator",
			"address", target.Advertise,
			"ttlSeconds", lease.GetTtlSeconds(),
			"heartbeatIntervalSeconds", lease.GetHeartbeatIntervalSeconds())
		heartbeatUntilLost(ctx, logger, client, name, lease, timing)
		_ = conn.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// tlsConfig reads the certificate files: mutual TLS 1.3, the operator
// verified against the CA and the endpoint's host.
func (target Target) tlsConfig(host string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(target.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: --registration-ca (CNPGI_REGISTRATION_CA): %w", ErrConfiguration, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: --registration-ca (CNPGI_REGISTRATION_CA) %s: no PEM certificate in it",
			ErrConfiguration, target.CA)
	}
	pair, err := tls.LoadX509KeyPair(target.Cert, target.Key)
	if err != nil {
		return nil, fmt.Errorf(
			"%w: the registration client certificate %s and key %s (--registration-cert/-key, else --server-cert/-key): %w",
			ErrConfiguration, target.Cert, target.Key, err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      roots,
		Certificates: []tls.Certificate{pair},
		ServerName:   host,
	}, nil
}

// register calls Register once, within deadline.
func register(
	ctx context.Context,
	client registrationpb.RegistrationClient,
	target Target,
	name, version string,
	deadline time.Duration,
) (*registrationpb.RegisterResponse, error) {
	callCtx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	return client.Register(callCtx, &registrationpb.RegisterRequest{
		Name:       name,
		Version:    version,
		Address:    target.Advertise,
		ServerName: target.ServerName,
	})
}

// heartbeatUntilLost beats every interval the operator asked for until it
// says it lost the lease (NOT_FOUND) or ctx is done.
func heartbeatUntilLost(
	ctx context.Context,
	logger logr.Logger,
	client registrationpb.RegistrationClient,
	name string,
	lease *registrationpb.RegisterResponse,
	timing Timing,
) {
	interval := time.Duration(max(lease.GetHeartbeatIntervalSeconds(), 1)) * time.Second
	deadline := min(timing.HeartbeatDeadline, interval)
	wait, retry := interval, min(timing.FirstRetry, interval)
	for sleep(ctx, wait) {
		callCtx, cancel := context.WithTimeout(ctx, deadline)
		_, err := client.Heartbeat(callCtx, &registrationpb.HeartbeatRequest{Name: name, LeaseId: lease.GetLeaseId()})
		cancel()
		switch {
		case err == nil:
			wait, retry = interval, min(timing.FirstRetry, interval)
		case ctx.Err() != nil:
			return
		case status.Code(err) == codes.NotFound:
			logger.Info("the operator lost the lease: registering again", "reason", status.Convert(err).Message())
			return
		default:
			logger.Info("heartbeat failed; retrying",
				"code", status.Code(err).String(),
				"error", status.Convert(err).Message(),
				"retryIn", retry.String())
			wait, retry = retry, min(retry*2, interval)
		}
	}
}

// sleep waits d, or less when ctx is done; it tells whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
