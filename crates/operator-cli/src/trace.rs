//! `render --trace`: the calls a render made to each plugin, in order, as
//! text (one line per call) or as a Mermaid sequence diagram to paste into
//! an issue.
//!
//! The calls are recorded by the host's routing ([`cnpgi_host::observe`]),
//! so the trace is what went over the wire, not a prediction. The calls
//! that register a plugin (`GetPluginMetadata`, the capabilities, `Probe`)
//! are the registry's, made once per plugin rather than per Cluster, and are
//! not shown.
//!
//! The trace goes to standard error, or to `--trace-file`: standard output
//! keeps the rendered YAML, so that `render --trace | kubectl apply -f -`
//! still works.

use std::{fs::File, io::Write as _, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use cnpgi_host::observe::{CallOutcome, CallRecorder, RouteObserver, RoutedCall};

/// How `--trace` prints the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum TraceFormat {
    /// One line per call: number, plugin, Service/RPC(request) -> answer [time].
    #[default]
    Text,
    /// A Mermaid sequence diagram (`sequenceDiagram`), for a Markdown
    /// ```mermaid block.
    Mermaid,
}

/// The tracing flags of `render`.
#[derive(Debug, Clone, Args)]
pub(crate) struct TraceFlags {
    /// Print the calls made to each plugin, in order: plugin, Service/RPC,
    /// a summary of the request and of the answer (or the error), and the
    /// time it took. On standard error, unless --trace-file.
    #[arg(long)]
    pub(crate) trace: bool,

    /// Format of the trace (implies --trace).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub(crate) trace_format: Option<TraceFormat>,

    /// Write the trace to FILE, created or replaced, instead of standard
    /// error (implies --trace).
    #[arg(long, value_name = "FILE")]
    pub(crate) trace_file: Option<PathBuf>,
}

/// Where a trace is written.
#[derive(Debug)]
enum Sink {
    Stderr,
    File(File, PathBuf),
}

/// A trace being recorded: give [`Trace::observer`] to the host, then
/// [`Trace::finish`] when the pipeline is done (whatever its outcome).
#[derive(Debug)]
pub(crate) struct Trace {
    recorder: Arc<CallRecorder>,
    format: TraceFormat,
    sink: Sink,
}

impl Trace {
    /// The trace the flags ask for, if any. `--trace-file` is created now,
    /// so that a path that cannot be written is refused before any plugin
    /// is started.
    pub(crate) fn from_flags(flags: &TraceFlags) -> anyhow::Result<Option<Self>> {
        if !flags.trace && flags.trace_format.is_none() && flags.trace_file.is_none() {
            return Ok(None);
        }
        let sink = match &flags.trace_file {
            None => Sink::Stderr,
            Some(path) => {
                let file = File::create(path)
                    .with_context(|| format!("--trace-file {}: cannot create the file", path.display()))?;
                Sink::File(file, path.clone())
            }
        };
        Ok(Some(Self {
            recorder: Arc::default(),
            format: flags.trace_format.unwrap_or_default(),
            sink,
        }))
    }

    /// The observer to route with ([`cnpgi_host::routing::RoutingPolicy::observer`]).
    pub(crate) fn observer(&self) -> Arc<dyn RouteObserver> {
        self.recorder.clone()
    }

    /// Writes the calls recorded, titled `title` (what was rendered).
    pub(crate) fn finish(self, title: &str) -> anyhow::Result<()> {
        let calls = self.recorder.take();
        let text = match self.format {
            TraceFormat::Text => text(title, &calls),
            TraceFormat::Mermaid => mermaid(title, &calls),
        };
        match self.sink {
            Sink::Stderr => {
                eprint!("{text}");
                Ok(())
            }
            Sink::File(mut file, path) => file
                .write_all(text.as_bytes())
                .and_then(|()| file.flush())
                .with_context(|| format!("--trace-file {}: cannot write the trace", path.display())),
        }
    }
}

/// `12.3 ms`: plugin calls take from a fraction of a millisecond to seconds.
fn millis(call: &RoutedCall) -> String {
    format!("{:.1} ms", call.elapsed.as_secs_f64() * 1000.0)
}

/// The plugins called, in the order of their first call.
fn plugins(calls: &[RoutedCall]) -> Vec<&str> {
    let mut plugins: Vec<&str> = Vec::new();
    for call in calls {
        if !plugins.contains(&call.plugin.as_str()) {
            plugins.push(&call.plugin);
        }
    }
    plugins
}

/// The first line: what was rendered, how many calls to how many plugins,
/// and the time spent in them.
fn headline(title: &str, calls: &[RoutedCall]) -> String {
    if calls.is_empty() {
        return format!("render --trace: {title}: no plugin was called");
    }
    let total: f64 = calls.iter().map(|c| c.elapsed.as_secs_f64() * 1000.0).sum();
    let plugins = plugins(calls).len();
    format!(
        "render --trace: {title}: {} call{} to {plugins} plugin{}, {total:.1} ms in all",
        calls.len(),
        if calls.len() == 1 { "" } else { "s" },
        if plugins == 1 { "" } else { "s" },
    )
}

/// One line per call, after a `#` headline:
/// `  1 PLUGIN Service/RPC(request) -> answer [time]`.
pub(crate) fn text(title: &str, calls: &[RoutedCall]) -> String {
    let mut out = format!("# {}\n", headline(title, calls));
    let width = calls.len().to_string().len();
    for (n, call) in calls.iter().enumerate() {
        out.push_str(&format!(
            "{:>width$} {} {}({}) -> {} [{}]\n",
            n + 1,
            call.plugin,
            call.rpc,
            one_line(&call.request),
            one_line(&call.outcome.to_string()),
            millis(call),
        ));
    }
    out
}

/// A Mermaid `sequenceDiagram`: the operator and each plugin called as
/// participants, for each call a request arrow (`->>`) and an answer arrow
/// (`-->>`, or `--x` for an error), in order.
pub(crate) fn mermaid(title: &str, calls: &[RoutedCall]) -> String {
    let mut out = String::from("sequenceDiagram\n");
    out.push_str(&format!("    %% {}\n", one_line(&headline(title, calls))));
    out.push_str("    participant operator\n");
    let plugins = plugins(calls);
    // Participants get short identifiers: a plugin's name has dots and
    // dashes, which Mermaid does not take in an identifier.
    let id = |plugin: &str| {
        let n = plugins.iter().position(|p| *p == plugin).unwrap_or_default();
        format!("P{}", n + 1)
    };
    for plugin in &plugins {
        out.push_str(&format!("    participant {} as {}\n", id(plugin), mermaid_text(plugin)));
    }
    for call in calls {
        let plugin = id(&call.plugin);
        out.push_str(&format!(
            "    operator->>{plugin}: {}\n",
            mermaid_text(&format!("{}({})", call.rpc, call.request))
        ));
        let arrow = match call.outcome {
            CallOutcome::Answered(_) => "-->>",
            CallOutcome::Failed { .. } => "--x",
        };
        out.push_str(&format!(
            "    {plugin}{arrow}operator: {}\n",
            mermaid_text(&format!("{} ({})", call.outcome, millis(call)))
        ));
    }
    out
}

/// `text` on one line: a plugin's error message may hold line breaks.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// `text` as Mermaid takes it in a message or a participant's alias: on
/// one line, with the characters its parser reads as syntax written as
/// entity codes, which it shows as the characters: `;` ends a statement (a
/// message with one does not parse), `#` starts an entity code, `<` and `>`
/// would be read as HTML. A `:` after the one that starts the message is
/// text (checked with Mermaid 11's parser), and is kept readable.
pub(crate) fn mermaid_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in one_line(text).chars() {
        match c {
            '#' => out.push_str("#35;"),
            ';' => out.push_str("#59;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            c => out.push(c),
        }
    }
    out
}

/// What `render` traced: `Cluster NAMESPACE/NAME`, and whether it was a
/// creation or an update (`--old`).
pub(crate) fn title(cluster: &serde_json::Value, update: bool) -> String {
    let text = |pointer: &str| cluster.pointer(pointer).and_then(serde_json::Value::as_str);
    let name = match (text("/metadata/namespace"), text("/metadata/name")) {
        (Some(namespace), Some(name)) => format!("{namespace}/{name}"),
        (None, Some(name)) => name.to_owned(),
        (_, None) => "(unnamed)".to_owned(),
    };
    format!("Cluster {name}, {}", if update { "update" } else { "create" })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn call(plugin: &str, rpc: &'static str, request: &str, outcome: CallOutcome, ms: u64) -> RoutedCall {
        RoutedCall {
            plugin: plugin.into(),
            rpc,
            request: request.into(),
            outcome,
            elapsed: Duration::from_micros(ms * 1000 + 300),
        }
    }

    fn calls() -> Vec<RoutedCall> {
        vec![
            call(
                "a.example.com",
                "Operator/MutateCluster",
                "Cluster db/pg",
                CallOutcome::Answered("1 op: add /spec/x".into()),
                2,
            ),
            call(
                "b.example.com",
                "Operator/ValidateClusterCreate",
                "Cluster db/pg",
                CallOutcome::Failed {
                    code: cnpgi_pluginhelper::tonic::Code::InvalidArgument,
                    message: "bad #1; see <docs>\nline two".into(),
                },
                1,
            ),
            call(
                "a.example.com",
                "Operator/SetStatusInCluster",
                "Cluster db/pg with its plugin entries",
                CallOutcome::Answered("status with enabled".into()),
                0,
            ),
        ]
    }

    #[test]
    fn text_is_one_line_per_call_in_order() {
        let text = text("Cluster db/pg, create", &calls());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "# render --trace: Cluster db/pg, create: 3 calls to 2 plugins, 3.9 ms in all",
                "1 a.example.com Operator/MutateCluster(Cluster db/pg) -> 1 op: add /spec/x [2.3 ms]",
                "2 b.example.com Operator/ValidateClusterCreate(Cluster db/pg) -> error InvalidArgument: bad #1; see <docs> line two [1.3 ms]",
                "3 a.example.com Operator/SetStatusInCluster(Cluster db/pg with its plugin entries) -> status with enabled [0.3 ms]",
            ]
        );
        assert_eq!(
            super::text("Cluster pg, update", &[]),
            "# render --trace: Cluster pg, update: no plugin was called\n"
        );
    }

    #[test]
    fn mermaid_has_a_participant_per_plugin_and_an_arrow_pair_per_call() {
        let diagram = mermaid("Cluster db/pg, create", &calls());
        let lines: Vec<&str> = diagram.lines().collect();
        assert_eq!(lines[0], "sequenceDiagram");
        assert!(lines[1].starts_with("    %% render --trace"), "{}", lines[1]);
        assert_eq!(
            &lines[2..5],
            [
                "    participant operator",
                "    participant P1 as a.example.com",
                "    participant P2 as b.example.com",
            ]
        );
        assert_eq!(
            &lines[5..],
            [
                "    operator->>P1: Operator/MutateCluster(Cluster db/pg)",
                "    P1-->>operator: 1 op: add /spec/x (2.3 ms)",
                "    operator->>P2: Operator/ValidateClusterCreate(Cluster db/pg)",
                "    P2--xoperator: error InvalidArgument: bad #35;1#59; see #lt;docs#gt; line two (1.3 ms)",
                "    operator->>P1: Operator/SetStatusInCluster(Cluster db/pg with its plugin entries)",
                "    P1-->>operator: status with enabled (0.3 ms)",
            ]
        );
    }

    #[test]
    fn titles_name_the_cluster_and_the_operation() {
        let cluster = serde_json::json!({"metadata": {"namespace": "db", "name": "pg"}});
        assert_eq!(title(&cluster, false), "Cluster db/pg, create");
        assert_eq!(
            title(&serde_json::json!({"metadata": {"name": "pg"}}), true),
            "Cluster pg, update"
        );
    }

    #[test]
    fn no_flag_no_trace_and_an_unwritable_file_is_named() {
        let none = TraceFlags {
            trace: false,
            trace_format: None,
            trace_file: None,
        };
        assert!(Trace::from_flags(&none).unwrap().is_none());
        let implied = TraceFlags {
            trace_format: Some(TraceFormat::Mermaid),
            ..none.clone()
        };
        assert!(
            Trace::from_flags(&implied).unwrap().is_some(),
            "--trace-format implies --trace"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir/trace.txt");
        let error = Trace::from_flags(&TraceFlags {
            trace_file: Some(path.clone()),
            ..none
        })
        .unwrap_err();
        assert!(
            format!("{error:#}").starts_with(&format!("--trace-file {}: cannot create the file", path.display())),
            "{error:#}"
        );
    }
}
