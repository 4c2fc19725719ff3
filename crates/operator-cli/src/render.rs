//! `cnpgi-operator render`: the plugin pipeline on a Cluster file, locally.

use std::{
    io::IsTerminal,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use cnpgi_host::{
    Host, HostError, HostOptions,
    registry::LookupError,
    routing::{PluginPatch, RouteError, RoutingPolicy},
};
use cnpgi_operator::{
    crd::Cluster,
    render::{self as pipeline, RenderError, Rendered},
};
use serde_json::Value;

use crate::{
    plugins::{LocalPluginFlags, LocalPlugins},
    trace::{Trace, TraceFlags},
};

/// When to colour `--diff` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum Color {
    /// When standard output is a terminal.
    #[default]
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Flags of `cnpgi-operator render`.
#[derive(Debug, Args)]
pub(crate) struct RenderArgs {
    /// The Cluster to render (YAML or JSON).
    #[arg(value_name = "CLUSTER.yaml")]
    pub(crate) cluster: PathBuf,

    /// The Cluster before the change: validate as an update.
    #[arg(long, value_name = "OLD.yaml")]
    pub(crate) old: Option<PathBuf>,

    /// Print each plugin's JSON patch and a diff of what it changed instead.
    #[arg(long)]
    pub(crate) diff: bool,

    /// Colour the diff.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub(crate) color: Color,

    #[command(flatten)]
    pub(crate) trace: TraceFlags,

    #[command(flatten)]
    pub(crate) plugins: LocalPluginFlags,
}

/// Reads and parses an object file (a Cluster), refusing what is not one.
pub(crate) fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text = read_input(path)?;
    anyhow::ensure!(
        !text.trim().is_empty(),
        "{} is empty: expected a Cluster in YAML or JSON",
        path.display()
    );
    let value = crate::yaml::parse_yaml(path, &text)?;
    anyhow::ensure!(value.is_object(), "{} does not hold an object", path.display());
    Ok(value)
}

/// The `apiVersion`s of the Clusters `render` takes: this project's CRD, and
/// CloudNativePG's (whose plugin fields are the same).
pub(crate) const CLUSTER_API_VERSIONS: [&str; 2] = ["cnpgi.io/v1", "postgresql.cnpg.io/v1"];

/// Reads a Cluster file, refusing (naming the file, what it holds and what
/// was expected) an object of another kind or API group, such as a Pod:
/// rendering it would make "instance Pods" of a Pod.
pub(crate) fn read_cluster(path: &Path) -> anyhow::Result<Value> {
    let value = read_object(path)?;
    let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str);
    let expected = format!(
        "a Cluster ({})",
        CLUSTER_API_VERSIONS
            .map(|version| format!("apiVersion {version}"))
            .join(" or ")
    );
    match (text("/kind"), text("/apiVersion")) {
        (Some("Cluster"), Some(version)) if CLUSTER_API_VERSIONS.contains(&version) => Ok(value),
        (Some(kind), version) => anyhow::bail!(
            "{} holds a {kind} of apiVersion {}, not {expected}",
            path.display(),
            version.unwrap_or("(none)")
        ),
        (None, _) => anyhow::bail!("{} has no kind: expected {expected}", path.display()),
    }
}

/// Largest input file read (a Cluster, with its status, is a few KiB; the
/// API server stores objects of at most about 1.5 MiB). A larger file is
/// refused before it is read: parsing 100 MB of YAML takes seconds and half
/// a gigabyte.
pub(crate) const MAX_INPUT_BYTES: u64 = 16 << 20;

/// The text of an input file, refused at once when larger than
/// [`MAX_INPUT_BYTES`] (checked on what is read, not only on the size the
/// file system reports: a pipe or a growing file has none).
pub(crate) fn read_input(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let too_large = || {
        anyhow::anyhow!(
            "{} is larger than {} MiB; refusing to read it",
            path.display(),
            MAX_INPUT_BYTES >> 20
        )
    };
    if file.metadata().is_ok_and(|m| m.is_file() && m.len() > MAX_INPUT_BYTES) {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_large());
    }
    Ok(text)
}

fn yaml(value: &Value) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n"))
}

/// Runs the pipeline; exit 1 on validation errors, 2 when plugins or input fail.
pub(crate) async fn render(args: RenderArgs) -> ExitCode {
    let input = async {
        let cluster = read_cluster(&args.cluster)?;
        let old = args.old.as_deref().map(read_cluster).transpose()?;
        let trace = Trace::from_flags(&args.trace)?;
        anyhow::Ok((cluster, old, trace))
    };
    let (cluster, old, trace) = match input.await {
        Ok(input) => input,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::from(2);
        }
    };
    let host = Host::<Cluster>::new(HostOptions {
        policy: RoutingPolicy {
            observer: trace.as_ref().map(Trace::observer),
            ..RoutingPolicy::default()
        },
        ..HostOptions::default()
    });
    let plugins = match LocalPlugins::start(&args.plugins, &host).await {
        Ok(plugins) => plugins,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let outcome = pipeline::render(&host, &cluster, old.as_ref()).await;
    // The trace comes first, whatever the outcome: it says which call failed.
    if let Some(trace) = trace
        && let Err(error) = trace.finish(&crate::trace::title(&cluster, old.is_some()))
    {
        eprintln!("error: {error:#}");
        return ExitCode::from(2);
    }
    match outcome {
        Ok(rendered) => {
            let colour = match args.color {
                Color::Always => true,
                Color::Never => false,
                Color::Auto => std::io::stdout().is_terminal(),
            };
            if args.diff {
                print!("{}", diff_report(&rendered, colour));
            } else {
                print!("{}", stream(&rendered));
            }
            ExitCode::SUCCESS
        }
        Err(RenderError::Invalid(errors)) => {
            let name = cluster
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            eprintln!("The Cluster {name:?} is invalid:");
            for error in errors {
                eprintln!("* {error}");
            }
            ExitCode::from(1)
        }
        Err(RenderError::Plugin(HostError::Route(RouteError::Unavailable(LookupError::Unknown { name })))) => {
            let found: Vec<&str> = plugins.found.iter().map(|(name, _, _)| name.as_str()).collect();
            let inputs = [
                Some((args.cluster.as_path(), &cluster)),
                args.old.as_deref().zip(old.as_ref()),
            ];
            eprintln!("error: {}", unknown_plugin(&name, inputs.into_iter().flatten(), &found));
            ExitCode::from(2)
        }
        Err(RenderError::Plugin(error)) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// Why a plugin the Cluster names is not there, and how to give it: the
/// file and `spec.plugins[N].name` naming it, the plugins that were found,
/// and the flags that provide one.
pub(crate) fn unknown_plugin<'a>(
    name: &str,
    inputs: impl IntoIterator<Item = (&'a Path, &'a Value)>,
    found: &[&str],
) -> String {
    let named_by = inputs
        .into_iter()
        .find_map(|(path, cluster)| {
            let entries = cluster.pointer("/spec/plugins").and_then(Value::as_array)?;
            let index = entries
                .iter()
                .position(|entry| entry.get("name").and_then(Value::as_str) == Some(name))?;
            Some(format!("{}: spec.plugins[{index}].name", path.display()))
        })
        .unwrap_or_else(|| "the Cluster".to_owned());
    let found = if found.is_empty() {
        "no plugin was given".to_owned()
    } else {
        format!("the plugins given are {}", found.join(", "))
    };
    format!(
        "{named_by} is {name}, which is none of the plugins given ({found}); give it with --plugin-exec PATH \
         (its binary), --plugin-dir DIR (a directory holding its socket) or --plugin {name}=ADDRESS"
    )
}

/// The names in a Cluster's `spec.plugins`, in order.
pub(crate) fn plugin_names(cluster: &Value) -> impl Iterator<Item = &str> {
    cluster
        .pointer("/spec/plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("name").and_then(Value::as_str))
}

/// The YAML stream: the mutated Cluster (with its status), then the Pods.
fn stream(rendered: &Rendered) -> String {
    let mut out = format!("---\n{}", yaml(&rendered.cluster));
    for pod in &rendered.pods {
        out.push_str(&format!("---\n{}", yaml(&pod.pod)));
    }
    out
}

fn paint(text: &str, colour: bool) -> String {
    if !colour {
        return text.to_owned();
    }
    text.lines()
        .map(|line| {
            let code = match line.as_bytes().first() {
                _ if line.starts_with("+++") || line.starts_with("---") => "1",
                Some(b'+') => "32",
                Some(b'-') => "31",
                Some(b'@') => "36",
                _ => return format!("{line}\n"),
            };
            format!("\x1b[{code}m{line}\x1b[0m\n")
        })
        .collect()
}

/// For each step, the plugin's patch and a unified diff of its effect.
fn steps(title: &str, start: &Value, patches: &[PluginPatch], colour: bool) -> String {
    let mut out = String::new();
    let mut current = start.clone();
    for step in patches {
        let mut next = current.clone();
        // These patches were applied successfully by the pipeline already.
        let _ = cnpgi_core::patch::apply_patch(&mut next, &step.patch);
        out.push_str(&format!("# {title} by {}\n", step.plugin));
        if step.patch.0.is_empty() {
            out.push_str("# (no change)\n\n");
        } else {
            let patch = serde_json::to_string_pretty(&step.patch).unwrap_or_default();
            out.push_str(&format!("{patch}\n"));
            let before = yaml(&current);
            let after = yaml(&next);
            let diff = similar::TextDiff::from_lines(&before, &after)
                .unified_diff()
                .header("before", "after")
                .to_string();
            out.push_str(&paint(&diff, colour));
            out.push('\n');
        }
        current = next;
    }
    out
}

fn diff_report(rendered: &Rendered, colour: bool) -> String {
    let mut out = steps(
        "MutateCluster on the Cluster",
        &rendered.original,
        &rendered.mutations,
        colour,
    );
    for pod in &rendered.pods {
        let name = pod
            .template
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("pod");
        out.push_str(&steps(
            &format!("LifecycleHook CREATE on Pod {name}"),
            &pod.template,
            &pod.patches,
            colour,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_cluster_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello-world/clusters");
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            crate::yaml::parse_yaml(&entry.path(), &text).unwrap();
        }
    }
}
