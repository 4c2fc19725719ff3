//! What the suite found: one [`Check`] per line of a [`Report`].

/// One check and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// A recommendation CNPG-I does not mandate (e.g. `INVALID_ARGUMENT` for
    /// garbage input): shown as `NOTE`, or a failure under
    /// [`ConformanceOptions::strict`](super::ConformanceOptions::strict).
    pub advisory: bool,
    /// Why it failed, or a detail when it passed.
    pub reason: String,
}

/// Every check run on one plugin.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The name the plugin was expected to have.
    pub plugin: String,
    /// The checks, in the order run.
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The failed checks.
    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.passed).collect()
    }

    /// The advice given (passed checks with a recommendation).
    pub fn advisories(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.passed && c.advisory).collect()
    }

    pub(super) fn record(&mut self, name: impl Into<String>, result: Result<String, String>) {
        let (passed, reason) = match result {
            Ok(detail) => (true, detail),
            Err(reason) => (false, reason),
        };
        self.checks.push(Check {
            name: name.into(),
            passed,
            advisory: false,
            reason,
        });
    }

    /// Records a check that passed with a recommendation; a failure when
    /// `strict`.
    pub(super) fn advise(&mut self, name: impl Into<String>, advice: String, strict: bool) {
        self.checks.push(Check {
            name: name.into(),
            passed: !strict,
            advisory: true,
            reason: advice,
        });
    }
}

impl std::fmt::Display for Report {
    /// A table: one line per check, `PASS`/`FAIL`, name, reason.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        writeln!(f, "plugin {}", self.plugin)?;
        for check in &self.checks {
            let verdict = match (check.passed, check.advisory) {
                (false, _) => "FAIL",
                (true, true) => "NOTE",
                (true, false) => "PASS",
            };
            writeln!(f, "  {verdict}  {:width$}  {}", check.name, check.reason)?;
        }
        let failed = self.failures().len();
        let advised = self.advisories().len();
        write!(
            f,
            "  {} checks, {} passed, {failed} failed",
            self.checks.len(),
            self.checks.len() - failed
        )?;
        if advised > 0 {
            write!(f, " ({advised} with a recommendation, NOTE)")?;
        }
        writeln!(f)
    }
}
