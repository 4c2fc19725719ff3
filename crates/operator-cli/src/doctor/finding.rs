//! A finding of `doctor`: what is wrong, the object and field that make it
//! wrong, and what to change; rendered as one text line or as JSON.

use std::fmt;

use serde_json::{Value, json};

/// How much a finding matters. Errors and warnings make `doctor` exit 1;
/// notes never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Severity {
    /// Something the doctor could not check, or worth knowing; never a failure.
    Note,
    /// Holds now but will not for long (a certificate about to expire).
    Warning,
    /// The operator cannot use the plugin as configured, or a Cluster's need is not met.
    Error,
}

impl Severity {
    /// The word of the text line and of the JSON `severity` field.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Self::Note => "note",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// A Kubernetes object, as `kind/namespace/name` (or `kind/name` when not
/// namespaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Object {
    /// Its kind, qualified by group when not core (`Cluster.postgresql.cnpg.io`).
    pub(crate) kind: String,
    /// Its namespace, if namespaced.
    pub(crate) namespace: Option<String>,
    /// Its name (`*` for "any object of this kind": a search that found nothing).
    pub(crate) name: String,
}

impl Object {
    /// A namespaced object.
    pub(crate) fn new(kind: impl Into<String>, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.into(),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    /// A Service.
    pub(crate) fn service(namespace: &str, name: &str) -> Self {
        Self::new("Service", namespace, name)
    }

    /// A Secret.
    pub(crate) fn secret(namespace: &str, name: &str) -> Self {
        Self::new("Secret", namespace, name)
    }

    fn to_json(&self) -> Value {
        json!({"kind": self.kind, "namespace": self.namespace, "name": self.name})
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{}/{}/{}", self.kind, namespace, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// One thing found wrong (or worth noting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// How much it matters.
    pub(crate) severity: Severity,
    /// A stable identifier of the check, for scripts (`service.port`).
    pub(crate) check: &'static str,
    /// The plugin concerned, when known.
    pub(crate) plugin: Option<String>,
    /// `namespace/name` of the plugin's Service examined when it was found
    /// (two namespaces may hold a plugin of the same name).
    pub(crate) service: Option<String>,
    /// The object that makes it wrong.
    pub(crate) object: Object,
    /// The field of that object, as a path: `metadata.annotations["cnpg.io/pluginPort"]`,
    /// `data["tls.crt"]`, `spec.plugins[0].isWALArchiver`; `None` for the object as a whole.
    pub(crate) field: Option<String>,
    /// What is wrong.
    pub(crate) problem: String,
    /// What to change.
    pub(crate) fix: String,
}

impl Finding {
    /// An error of `check` on `object`'s `field`.
    pub(crate) fn error(
        check: &'static str,
        object: Object,
        field: Option<&str>,
        problem: String,
        fix: String,
    ) -> Self {
        Self {
            severity: Severity::Error,
            check,
            plugin: None,
            service: None,
            object,
            field: field.map(str::to_owned),
            problem,
            fix,
        }
    }

    /// The same finding as a warning.
    pub(crate) fn warning(mut self) -> Self {
        self.severity = Severity::Warning;
        self
    }

    /// The same finding as a note.
    pub(crate) fn note(mut self) -> Self {
        self.severity = Severity::Note;
        self
    }

    /// The same finding, about `plugin`.
    pub(crate) fn for_plugin(mut self, plugin: &str) -> Self {
        self.plugin = Some(plugin.to_owned());
        self
    }

    /// The JSON object `--output json` prints for it.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "severity": self.severity.word(),
            "check": self.check,
            "plugin": self.plugin,
            "service": self.service,
            "object": self.object.to_json(),
            "field": self.field,
            "problem": self.problem,
            "fix": self.fix,
        })
    }
}

/// One line: `error   Service/ns/name metadata.annotations["cnpg.io/pluginPort"]: <problem>; fix: <fix>`.
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<7} {}", self.severity.word(), self.object)?;
        if let Some(field) = &self.field {
            write!(f, " {field}")?;
        }
        write!(f, ": {}", one_line(&self.problem))?;
        if !self.fix.is_empty() {
            write!(f, "; fix: {}", one_line(&self.fix))?;
        }
        Ok(())
    }
}

/// Text from elsewhere (an error message, a certificate name) on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a plugin turned out to be, for the summary (text) and the `plugins`
/// array (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PluginSummary {
    /// The plugin name (the Service's label).
    pub(crate) name: String,
    /// `namespace/name` of its Service.
    pub(crate) service: String,
    /// What the operator dials, `<service>.<namespace>.svc:<port>`, when the annotations say.
    pub(crate) address: Option<String>,
    /// The TLS server name it verifies.
    pub(crate) server_name: Option<String>,
    /// Ready endpoints behind the Service.
    pub(crate) ready_endpoints: usize,
    /// Where the doctor dialled and whether the probe passed, one entry per endpoint.
    pub(crate) dialled: Vec<(String, bool)>,
    /// The plugin's version, when probed.
    pub(crate) version: Option<String>,
    /// The services it advertises (`TYPE_...`), when probed.
    pub(crate) services: Vec<String>,
    /// Clusters, Backups and ScheduledBackups that use it.
    pub(crate) used_by: Vec<String>,
}

impl PluginSummary {
    /// Whether `finding` is about this plugin's Service.
    fn owns(&self, finding: &Finding) -> bool {
        finding.plugin.as_deref() == Some(self.name.as_str())
            && finding.service.as_deref().is_none_or(|service| service == self.service)
    }

    fn to_json(&self, findings: &[Finding]) -> Value {
        json!({
            "name": self.name,
            "service": self.service,
            "address": self.address,
            "serverName": self.server_name,
            "readyEndpoints": self.ready_endpoints,
            "dialled": self.dialled.iter().map(|(via, ok)| json!({"via": via, "probed": ok})).collect::<Vec<_>>(),
            "version": self.version,
            "services": self.services,
            "usedBy": self.used_by,
            "passed": passed(findings.iter().filter(|f| self.owns(f))),
        })
    }
}

/// Whether none of `findings` is an error or a warning.
pub(crate) fn passed<'a>(mut findings: impl Iterator<Item = &'a Finding>) -> bool {
    !findings.any(|f| f.severity >= Severity::Warning)
}

/// Everything `doctor` found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Each plugin examined.
    pub(crate) plugins: Vec<PluginSummary>,
    /// Every finding, in the order found.
    pub(crate) findings: Vec<Finding>,
}

impl Report {
    /// Whether everything holds (no error, no warning).
    pub(crate) fn passed(&self) -> bool {
        passed(self.findings.iter())
    }

    fn count(&self, severity: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == severity).count()
    }

    /// The text output: one line per finding, one per plugin, a last line.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for finding in &self.findings {
            out.push_str(&finding.to_string());
            out.push('\n');
        }
        for plugin in &self.plugins {
            let ok = passed(self.findings.iter().filter(|f| plugin.owns(f)));
            out.push_str(&format!(
                "{:<7} plugin {} (Service {}",
                if ok { "ok" } else { "FAIL" },
                plugin.name,
                plugin.service
            ));
            if let Some(address) = &plugin.address {
                out.push_str(&format!(", the operator dials {address}"));
            }
            if let Some(server_name) = &plugin.server_name {
                out.push_str(&format!(", server name {server_name}"));
            }
            out.push_str(&format!("): {} ready endpoint(s)", plugin.ready_endpoints));
            let probed = plugin.dialled.iter().filter(|(_, ok)| *ok).count();
            if !plugin.dialled.is_empty() {
                out.push_str(&format!(", {probed}/{} probed", plugin.dialled.len()));
            }
            if let Some(version) = &plugin.version {
                out.push_str(&format!(", version {version}"));
            }
            if !plugin.services.is_empty() {
                out.push_str(&format!(", advertises {}", plugin.services.join(" ")));
            }
            if !plugin.used_by.is_empty() {
                out.push_str(&format!(", used by {}", plugin.used_by.join(" ")));
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "doctor: {} error(s), {} warning(s), {} note(s): {}\n",
            self.count(Severity::Error),
            self.count(Severity::Warning),
            self.count(Severity::Note),
            if self.passed() { "passed" } else { "FAILED" }
        ));
        out
    }

    /// The JSON output (`--output json`).
    pub(crate) fn json(&self) -> Value {
        json!({
            "passed": self.passed(),
            "errors": self.count(Severity::Error),
            "warnings": self.count(Severity::Warning),
            "notes": self.count(Severity::Note),
            "plugins": self.plugins.iter().map(|p| p.to_json(&self.findings)).collect::<Vec<_>>(),
            "findings": self.findings.iter().map(Finding::to_json).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port_finding() -> Finding {
        Finding::error(
            "service.port",
            Object::service("cnpgi-system", "hello"),
            Some(r#"metadata.annotations["cnpg.io/pluginPort"]"#),
            "\"9091\" is not a port of the Service\n(it has 9090)".into(),
            "set it to 9090".into(),
        )
        .for_plugin("hello.example.com")
    }

    #[test]
    fn a_finding_is_one_line_naming_object_field_problem_and_fix() {
        assert_eq!(
            port_finding().to_string(),
            r#"error   Service/cnpgi-system/hello metadata.annotations["cnpg.io/pluginPort"]: "9091" is not a port of the Service (it has 9090); fix: set it to 9090"#
        );
        let note = Finding::error(
            "x",
            Object::new("Cluster.cnpgi.io", "db", "pg"),
            None,
            "p".into(),
            String::new(),
        )
        .note();
        assert_eq!(note.to_string(), "note    Cluster.cnpgi.io/db/pg: p");
    }

    #[test]
    fn json_has_every_field_and_the_verdicts() {
        let report = Report {
            plugins: vec![
                PluginSummary {
                    name: "hello.example.com".into(),
                    service: "cnpgi-system/hello".into(),
                    ..PluginSummary::default()
                },
                PluginSummary {
                    name: "other.example.com".into(),
                    service: "cnpgi-system/other".into(),
                    ..PluginSummary::default()
                },
            ],
            findings: vec![port_finding()],
        };
        let json = report.json();
        assert_eq!(json["passed"], false);
        assert_eq!(json["errors"], 1);
        let finding = &json["findings"][0];
        assert_eq!(finding["severity"], "error");
        assert_eq!(finding["check"], "service.port");
        assert_eq!(finding["object"]["kind"], "Service");
        assert_eq!(finding["object"]["namespace"], "cnpgi-system");
        assert_eq!(finding["field"], r#"metadata.annotations["cnpg.io/pluginPort"]"#);
        assert_eq!(finding["fix"], "set it to 9090");
        assert_eq!(json["plugins"][0]["passed"], false);
        assert_eq!(json["plugins"][1]["passed"], true);
        let text = report.text();
        assert!(text.contains("FAIL    plugin hello.example.com"), "{text}");
        assert!(text.contains("ok      plugin other.example.com"), "{text}");
        assert!(
            text.ends_with("doctor: 1 error(s), 0 warning(s), 0 note(s): FAILED\n"),
            "{text}"
        );
    }

    #[test]
    fn a_finding_counts_against_its_own_service_only() {
        let summary = |service: &str| PluginSummary {
            name: "hello.example.com".into(),
            service: service.into(),
            ..PluginSummary::default()
        };
        let mut finding = port_finding();
        finding.service = Some("cnpg-system/hello".into());
        let report = Report {
            plugins: vec![summary("cnpg-system/hello"), summary("cnpgi-system/hello")],
            findings: vec![finding],
        };
        let json = report.json();
        assert_eq!(json["plugins"][0]["passed"], false);
        assert_eq!(json["plugins"][1]["passed"], true);
        assert_eq!(json["findings"][0]["service"], "cnpg-system/hello");
    }

    #[test]
    fn notes_do_not_fail_warnings_do() {
        let mut report = Report::default();
        report.findings.push(port_finding().note());
        assert!(report.passed());
        report.findings.push(port_finding().warning());
        assert!(!report.passed());
    }
}
