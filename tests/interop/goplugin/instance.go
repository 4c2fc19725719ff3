// The instance-side services of the Go plugin, on upstream cnpg-i's stubs:
// WAL (Archive, Restore), Backup, RestoreJobHooks, Postgres
// (EnrichConfiguration) and Metrics. WAL files and base backups are kept in
// the directory of the "archive" parameter; PGDATA is the "pgdata"
// parameter, or $PGDATA. The parameters come from the plugin's
// spec.plugins entry (cnpg-i-machinery's common.NewPlugin), or from the
// external cluster whose plugin it is (a restore).
package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	apiv1 "github.com/cloudnative-pg/api/pkg/api/v1"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/common"
	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/decoder"
	"github.com/cloudnative-pg/cnpg-i/pkg/backup"
	"github.com/cloudnative-pg/cnpg-i/pkg/metrics"
	"github.com/cloudnative-pg/cnpg-i/pkg/postgres"
	restore "github.com/cloudnative-pg/cnpg-i/pkg/restore/job"
	"github.com/cloudnative-pg/cnpg-i/pkg/wal"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// walName accepts what PostgreSQL archives: segments, .partial, .history
// and .backup files.
var walName = regexp.MustCompile(`^([0-9A-F]{24}(\.partial|\.[0-9A-F]{8}\.backup)?|[0-9A-F]{8}\.history)$`)

// archiveCalls counts successful Archive calls, for the metrics.
var archiveCalls atomic.Int64

// parameters are the plugin's parameters in the Cluster.
func parameters(clusterJSON []byte) (map[string]string, error) {
	cluster, err := decoder.DecodeClusterLenient(clusterJSON)
	if err != nil {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "cannot decode the Cluster: %v", err)
	}
	if helper := common.NewPlugin(*cluster, pluginName); helper.PluginIndex >= 0 {
		return helper.Parameters, nil
	}
	for _, external := range cluster.Spec.ExternalClusters {
		if external.PluginConfiguration != nil && external.PluginConfiguration.Name == pluginName {
			return external.PluginConfiguration.Parameters, nil
		}
	}
	return map[string]string{}, nil
}

func archiveDir(params map[string]string) (string, error) {
	if dir := params["archive"]; dir != "" {
		return dir, nil
	}
	return "", grpcstatus.Error(codes.FailedPrecondition, "the parameter archive is not set")
}

func pgdataDir(params map[string]string) (string, error) {
	if dir := params["pgdata"]; dir != "" {
		return dir, nil
	}
	if dir := os.Getenv("PGDATA"); dir != "" {
		return dir, nil
	}
	return "", grpcstatus.Error(codes.FailedPrecondition, "neither the parameter pgdata nor PGDATA is set")
}

// writeAtomically writes through a temporary file renamed into place.
func writeAtomically(path string, contents []byte) error {
	temporary := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	file, err := os.Create(temporary)
	if err != nil {
		return err
	}
	if _, err := file.Write(contents); err != nil {
		file.Close()
		os.Remove(temporary)
		return err
	}
	if err := file.Sync(); err != nil {
		file.Close()
		os.Remove(temporary)
		return err
	}
	if err := file.Close(); err != nil {
		os.Remove(temporary)
		return err
	}
	return os.Rename(temporary, path)
}

// copyTree copies the files under from into to, skipping what skip names.
func copyTree(from, to string, skip func(relative string) bool) (int, error) {
	copied := 0
	err := filepath.WalkDir(from, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		relative, _ := filepath.Rel(from, path)
		if relative != "." && skip(relative) {
			if entry.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		target := filepath.Join(to, relative)
		if entry.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if !entry.Type().IsRegular() {
			return nil
		}
		contents, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		copied++
		return os.WriteFile(target, contents, 0o600)
	})
	return copied, err
}

type walServer struct {
	wal.UnimplementedWALServer
}

func (walServer) GetCapabilities(context.Context, *wal.WALCapabilitiesRequest) (*wal.WALCapabilitiesResult, error) {
	rpc := func(t wal.WALCapability_RPC_Type) *wal.WALCapability {
		return &wal.WALCapability{Type: &wal.WALCapability_Rpc{Rpc: &wal.WALCapability_RPC{Type: t}}}
	}
	return &wal.WALCapabilitiesResult{Capabilities: []*wal.WALCapability{
		rpc(wal.WALCapability_RPC_TYPE_ARCHIVE_WAL),
		rpc(wal.WALCapability_RPC_TYPE_RESTORE_WAL),
	}}, nil
}

// Archive stores the file under its name; an archived name with the same
// content is a success, with another content an error.
func (walServer) Archive(_ context.Context, r *wal.WALArchiveRequest) (*wal.WALArchiveResult, error) {
	params, err := parameters(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	dir, err := archiveDir(params)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(r.GetSourceFileName())
	if !walName.MatchString(name) || !filepath.IsAbs(r.GetSourceFileName()) {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "%q is not the absolute path of a WAL file", r.GetSourceFileName())
	}
	contents, err := os.ReadFile(r.GetSourceFileName())
	if err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot read %s: %v", r.GetSourceFileName(), err)
	}
	target := filepath.Join(dir, name)
	if existing, err := os.ReadFile(target); err == nil {
		if bytes.Equal(existing, contents) {
			archiveCalls.Add(1)
			return &wal.WALArchiveResult{}, nil
		}
		return nil, grpcstatus.Errorf(codes.AlreadyExists, "WAL file %s is already archived with different content", name)
	}
	if err := writeAtomically(target, contents); err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot archive %s: %v", name, err)
	}
	archiveCalls.Add(1)
	return &wal.WALArchiveResult{}, nil
}

// Restore copies the file into place whole, or answers NOT_FOUND.
func (walServer) Restore(_ context.Context, r *wal.WALRestoreRequest) (*wal.WALRestoreResult, error) {
	params, err := parameters(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	dir, err := archiveDir(params)
	if err != nil {
		return nil, err
	}
	if !walName.MatchString(r.GetSourceWalName()) {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "%q is not a WAL file name", r.GetSourceWalName())
	}
	contents, err := os.ReadFile(filepath.Join(dir, r.GetSourceWalName()))
	if os.IsNotExist(err) {
		return nil, grpcstatus.Errorf(codes.NotFound, "WAL file %s is not in the archive", r.GetSourceWalName())
	}
	if err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot read %s: %v", r.GetSourceWalName(), err)
	}
	if err := writeAtomically(r.GetDestinationFileName(), contents); err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot write %s: %v", r.GetDestinationFileName(), err)
	}
	return &wal.WALRestoreResult{}, nil
}

type backupServer struct {
	backup.UnimplementedBackupServer
}

func (backupServer) GetCapabilities(context.Context, *backup.BackupCapabilitiesRequest) (*backup.BackupCapabilitiesResult, error) {
	return &backup.BackupCapabilitiesResult{Capabilities: []*backup.BackupCapability{{
		Type: &backup.BackupCapability_Rpc{Rpc: &backup.BackupCapability_RPC{Type: backup.BackupCapability_RPC_TYPE_BACKUP}},
	}}}, nil
}

// Backup copies PGDATA, without pg_wal's files and postmaster.pid, into
// base/<Backup name>/.
func (backupServer) Backup(_ context.Context, r *backup.BackupRequest) (*backup.BackupResult, error) {
	params, err := parameters(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	object, err := decoder.DecodeBackupLenient(r.GetBackupDefinition())
	if err != nil {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "cannot decode the Backup: %v", err)
	}
	if object.Status.Phase != apiv1.BackupPhaseStarted {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "the Backup is in phase %q, not started", object.Status.Phase)
	}
	if object.Name == "" || strings.ContainsAny(object.Name, "/.") {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "the Backup name %q cannot name a directory", object.Name)
	}
	dir, err := archiveDir(params)
	if err != nil {
		return nil, err
	}
	pgdata, err := pgdataDir(params)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	target := filepath.Join(dir, "base", object.Name)
	files, err := copyTree(pgdata, target, func(relative string) bool {
		return strings.HasPrefix(relative, "pg_wal"+string(filepath.Separator)) || relative == "postmaster.pid"
	})
	if err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot copy PGDATA: %v", err)
	}
	return &backup.BackupResult{
		BackupId:   object.Name,
		BackupName: object.Name,
		StartedAt:  started.Unix(),
		StoppedAt:  time.Now().Unix(),
		Online:     false,
		Metadata:   map[string]string{"files": fmt.Sprint(files), "writer": "go"},
	}, nil
}

type restoreServer struct {
	restore.UnimplementedRestoreJobHooksServer
}

func (restoreServer) GetCapabilities(context.Context, *restore.RestoreJobHooksCapabilitiesRequest) (*restore.RestoreJobHooksCapabilitiesResult, error) {
	return &restore.RestoreJobHooksCapabilitiesResult{Capabilities: []*restore.RestoreJobHooksCapability{
		{Kind: restore.RestoreJobHooksCapability_KIND_RESTORE},
	}}, nil
}

// Restore copies the latest base backup (by name) into PGDATA.
func (restoreServer) Restore(_ context.Context, r *restore.RestoreRequest) (*restore.RestoreResponse, error) {
	params, err := parameters(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	dir, err := archiveDir(params)
	if err != nil {
		return nil, err
	}
	pgdata, err := pgdataDir(params)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(dir, "base"))
	if err != nil || len(entries) == 0 {
		return nil, grpcstatus.Errorf(codes.NotFound, "no base backup in %s", filepath.Join(dir, "base"))
	}
	names := make([]string, 0, len(entries))
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	sort.Strings(names)
	latest := names[len(names)-1]
	if _, err := copyTree(filepath.Join(dir, "base", latest), pgdata, func(string) bool { return false }); err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot restore PGDATA: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(pgdata, "pg_wal"), 0o700); err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot create pg_wal: %v", err)
	}
	command := params["restoreCommand"]
	if command == "" {
		// What plugins written for CloudNativePG's Pods answer (plugin-barman-cloud's string).
		command = "/controller/manager wal-restore --log-destination /controller/log/postgres.json %f %p"
	}
	return &restore.RestoreResponse{
		RestoreConfig: fmt.Sprintf("recovery_target_action = promote\nrestore_command = '%s'\n", strings.ReplaceAll(command, "'", "''")),
		Envs:          []string{"GO_PLUGIN_BACKUP=" + latest},
	}, nil
}

type postgresServer struct {
	postgres.UnimplementedPostgresServer
}

func (postgresServer) GetCapabilities(context.Context, *postgres.PostgresCapabilitiesRequest) (*postgres.PostgresCapabilitiesResult, error) {
	return &postgres.PostgresCapabilitiesResult{Capabilities: []*postgres.PostgresCapability{{
		Type: &postgres.PostgresCapability_Rpc{Rpc: &postgres.PostgresCapability_RPC{Type: postgres.PostgresCapability_RPC_TYPE_ENRICH_CONFIGURATION}},
	}}}, nil
}

// EnrichConfiguration answers the complete map with go_plugin.color set to
// the plugin's color (CloudNativePG replaces the whole map with it).
func (postgresServer) EnrichConfiguration(_ context.Context, r *postgres.EnrichConfigurationRequest) (*postgres.EnrichConfigurationResult, error) {
	cluster, err := decoder.DecodeClusterLenient(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	configs := make(map[string]string, len(r.GetConfigs())+1)
	for k, v := range r.GetConfigs() {
		configs[k] = v
	}
	configs["go_plugin.color"] = color(common.NewPlugin(*cluster, pluginName))
	return &postgres.EnrichConfigurationResult{Configs: configs}, nil
}

type metricsServer struct {
	metrics.UnimplementedMetricsServer
}

func (metricsServer) GetCapabilities(context.Context, *metrics.MetricsCapabilitiesRequest) (*metrics.MetricsCapabilitiesResult, error) {
	return &metrics.MetricsCapabilitiesResult{Capabilities: []*metrics.MetricsCapability{{
		Type: &metrics.MetricsCapability_Rpc{Rpc: &metrics.MetricsCapability_RPC{Type: metrics.MetricsCapability_RPC_TYPE_METRICS}},
	}}}, nil
}

func (metricsServer) Define(context.Context, *metrics.DefineMetricsRequest) (*metrics.DefineMetricsResult, error) {
	return &metrics.DefineMetricsResult{Metrics: []*metrics.Metric{
		{
			FqName:         "cnpgi_go_plugin_archived_wal_files",
			Help:           "WAL files in the archive directory, by color",
			VariableLabels: []string{"color"},
			ConstLabels:    map[string]string{"writer": "go"},
			ValueType:      &metrics.MetricType{Type: metrics.MetricType_TYPE_GAUGE},
		},
		{
			FqName:    "cnpgi_go_plugin_archive_calls_total",
			Help:      "Successful Archive calls since the plugin started",
			ValueType: &metrics.MetricType{Type: metrics.MetricType_TYPE_COUNTER},
		},
	}}, nil
}

func (metricsServer) Collect(_ context.Context, r *metrics.CollectMetricsRequest) (*metrics.CollectMetricsResult, error) {
	params, err := parameters(r.GetClusterDefinition())
	if err != nil {
		return nil, err
	}
	dir, err := archiveDir(params)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "cannot read %s: %v", dir, err)
	}
	files := 0
	for _, entry := range entries {
		if walName.MatchString(entry.Name()) {
			files++
		}
	}
	shade := params["color"]
	if shade == "" {
		shade = defaultColor
	}
	return &metrics.CollectMetricsResult{Metrics: []*metrics.CollectMetric{
		{FqName: "cnpgi_go_plugin_archived_wal_files", Value: float64(files), VariableLabels: []string{shade}},
		{FqName: "cnpgi_go_plugin_archive_calls_total", Value: float64(archiveCalls.Load())},
	}}, nil
}
