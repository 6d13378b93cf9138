//! The log output of the binaries: `--log-format text` (the default, human-readable lines)
//! or `--log-format json` (one JSON object per line, for log collectors).
//!
//! A JSON line carries the event's fields under `fields`, the innermost span under `span`
//! and every enclosing span under `spans`, each with its fields: a reconcile's lines name
//! the object (`{"span":{"name":"reconcile","cloneset":"ns/demo"},…}`).

pub use inplace_proto::logging::*;

#[cfg(test)]
mod tests {
    use inplace_testkit::logs::capture;

    use super::*;
    /// Logs a reconcile's lines, in the span the reconciler opens, with `format`.
    fn log_a_reconcile(format: LogFormat) -> String {
        capture(format, || {
            let span = crate::runtime::reconcile_span("ns", "demo");
            let _in = span.enter();
            tracing::info!(actions = 3, "planned");
            tracing::warn!(error = "conflict", "retrying");
        })
    }

    #[test]
    fn json_lines_parse_and_carry_the_reconciled_object() -> Result<(), serde_json::Error> {
        let out = log_a_reconcile(LogFormat::Json);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line)?;
            assert_eq!(v["span"]["name"], "reconcile", "{line}");
            assert_eq!(v["span"]["cloneset"], "ns/demo", "{line}");
            assert_eq!(v["spans"][0]["cloneset"], "ns/demo", "{line}");
            assert!(v["timestamp"].is_string(), "{line}");
        }
        let first: serde_json::Value = serde_json::from_str(lines[0])?;
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["fields"]["message"], "planned");
        assert_eq!(first["fields"]["actions"], 3);
        let second: serde_json::Value = serde_json::from_str(lines[1])?;
        assert_eq!(second["level"], "WARN");
        assert_eq!(second["fields"]["error"], "conflict");
        Ok(())
    }

    #[test]
    fn text_is_the_default_and_is_not_json() {
        assert_eq!(LogFormat::default(), LogFormat::Text);
        let out = log_a_reconcile(LogFormat::Text);
        assert_eq!(out.lines().count(), 2, "{out}");
        for line in out.lines() {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_err(),
                "{line}"
            );
            assert!(line.contains("reconcile"), "{line}");
            assert!(
                !line.contains('\u{1b}'),
                "no colours off a terminal: {line}"
            );
            assert!(
                line.contains("cloneset") && line.contains("ns/demo"),
                "{line}"
            );
        }
    }
}
