//! `cnpgi-operator render`: the plugin pipeline on a Cluster file, locally.

use std::{io::IsTerminal, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use cnpgi_operator::{
    local::{self, RenderError, Rendered},
    routing::{PluginPatch, Router, RoutingPolicy},
};
use serde_json::Value;

use crate::plugins::{LocalPluginFlags, LocalPlugins};

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
    pub(crate) plugins: LocalPluginFlags,
}

fn read_object(path: &PathBuf) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{} is not valid YAML", path.display()))?;
    anyhow::ensure!(value.is_object(), "{} does not hold an object", path.display());
    Ok(value)
}

fn yaml(value: &Value) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_else(|e| format!("# cannot print as YAML: {e}\n"))
}

/// Runs the pipeline; exit 1 on validation errors, 2 when plugins or input fail.
pub(crate) async fn render(args: RenderArgs) -> ExitCode {
    let input = async {
        let cluster = read_object(&args.cluster)?;
        let old = args.old.as_ref().map(read_object).transpose()?;
        anyhow::Ok((cluster, old))
    };
    let (cluster, old) = match input.await {
        Ok(input) => input,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::from(2);
        }
    };
    let plugins = match LocalPlugins::start(&args.plugins).await {
        Ok(plugins) => plugins,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let router = Router::new(plugins.registry.clone(), RoutingPolicy::default());
    match local::render(&router, &cluster, old.as_ref()).await {
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
        Err(RenderError::Plugin(error)) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
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
        let _ = json_patch::patch(&mut next, &step.patch);
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
