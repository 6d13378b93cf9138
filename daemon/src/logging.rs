//! The log output of the binaries: `--log-format text` (the default, human-readable lines)
//! or `--log-format json` (one JSON object per line, for log collectors).
//!
//! A JSON line carries the event's fields under `fields`, the innermost span under `span`
//! and every enclosing span under `spans`, each with its fields: the lines about one pod,
//! ContainerRecreateRequest or image name it (`{"span":{"name":"pod","pod":"ns/demo"},…}`).
//! The format itself is `inplace_proto::logging`, shared with the controller.

pub use inplace_proto::logging::*;

/// The span of the work on one pod (`pod=namespace/name`).
pub fn pod_span(namespace: &str, name: &str) -> tracing::Span {
    tracing::info_span!("pod", pod = %format_args!("{namespace}/{name}"))
}

/// The span of the work on one ContainerRecreateRequest and its pod.
pub fn crr_span(namespace: &str, name: &str, pod: &str) -> tracing::Span {
    tracing::info_span!(
        "crr",
        crr = %format_args!("{namespace}/{name}"),
        pod = %format_args!("{namespace}/{pod}")
    )
}

/// The span of one image pull (`image=name:tag`).
pub fn pull_span(image: &str) -> tracing::Span {
    tracing::info_span!("pull", image = %image)
}

#[cfg(test)]
mod tests {
    use inplace_testkit::logs::capture;

    use super::*;
    /// Logs two lines in the span the in-place executor opens for a pod, with `format`.
    fn log_a_reconcile(format: LogFormat) -> String {
        capture(format, || {
            let span = pod_span("ns", "demo");
            let _in = span.enter();
            tracing::info!(actions = 3, "planned");
            tracing::warn!(error = "conflict", "retrying");
        })
    }

    #[test]
    fn json_lines_parse_and_carry_the_pod() -> Result<(), serde_json::Error> {
        let out = log_a_reconcile(LogFormat::Json);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line)?;
            assert_eq!(v["span"]["name"], "pod", "{line}");
            assert_eq!(v["span"]["pod"], "ns/demo", "{line}");
            assert_eq!(v["spans"][0]["pod"], "ns/demo", "{line}");
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
    fn crr_and_pull_spans_name_their_objects() -> Result<(), serde_json::Error> {
        let out = capture(LogFormat::Json, || {
            crr_span("ns", "restart-1", "web-0").in_scope(|| tracing::info!("killed"));
            pull_span("nginx:1.25").in_scope(|| tracing::info!("pulled"));
        });
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0]["span"]["crr"], "ns/restart-1");
        assert_eq!(lines[0]["span"]["pod"], "ns/web-0");
        assert_eq!(lines[1]["span"]["image"], "nginx:1.25");
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
            assert!(line.contains("pod") && line.contains("ns/demo"), "{line}");
        }
    }
}
