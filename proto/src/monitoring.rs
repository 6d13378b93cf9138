//! What the shipped dashboard and alert rules (`deploy/monitoring/`) ask of the metrics:
//! both binaries' tests check that every series named there is one they export.

use std::collections::BTreeSet;

/// The files under `deploy/monitoring/`, as shipped (embedded at build time).
pub const FILES: &[(&str, &str)] = &[
    (
        "grafana-dashboard.json",
        include_str!("../../deploy/monitoring/grafana-dashboard.json"),
    ),
    (
        "prometheus-rules.yaml",
        include_str!("../../deploy/monitoring/prometheus-rules.yaml"),
    ),
];

/// The metric names (`inplace_…`) `text` mentions.
pub fn metric_names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let name_char = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
    let mut i = 0;
    while let Some(at) = text[i..].find("inplace_") {
        let start = i + at;
        // Part of a longer word (e.g. `xinplace_`): not a metric name.
        if start > 0 && (name_char(bytes[start - 1]) || bytes[start - 1].is_ascii_uppercase()) {
            i = start + 1;
            continue;
        }
        let mut end = start;
        while end < bytes.len() && name_char(bytes[end]) {
            end += 1;
        }
        out.insert(text[start..end].to_owned());
        i = end;
    }
    out
}

/// The sample names of a Prometheus text exposition (`name{labels} value` lines).
pub fn sample_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Names `FILES` use with `prefix` (and not `except`) that `exported` lacks, by file.
pub fn missing(exported: &BTreeSet<String>, prefix: &str, except: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for (file, text) in FILES {
        for name in metric_names_in(text) {
            let ours = name.starts_with(prefix) && except.is_none_or(|e| !name.starts_with(e));
            if ours && !exported.contains(&name) {
                out.push(format!("{file}: {name}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_in_expressions() {
        let text = r#"{"expr": "sum(rate(inplace_pods_created_total{namespace=~\"$ns\"}[5m])) / inplace_leader", "x": "notinplace_x", "y": "Inplace_y"}"#;
        let names: Vec<String> = metric_names_in(text).into_iter().collect();
        assert_eq!(names, ["inplace_leader", "inplace_pods_created_total"]);
    }

    #[test]
    fn sample_names_of_an_exposition() {
        let text = "# HELP a x\n# TYPE a counter\na_total{x=\"1\"} 1\nb 2\nc_bucket{le=\"1\"} 0\n";
        let names: Vec<String> = sample_names(text).into_iter().collect();
        assert_eq!(names, ["a_total", "b", "c_bucket"]);
    }

    #[test]
    #[allow(clippy::expect_used)]
    fn the_shipped_files_name_metrics_of_both_binaries() {
        let all: BTreeSet<String> = FILES.iter().flat_map(|(_, t)| metric_names_in(t)).collect();
        assert!(
            all.iter().any(|n| n.starts_with("inplace_daemon_")),
            "{all:?}"
        );
        assert!(
            all.iter().any(|n| !n.starts_with("inplace_daemon_")),
            "{all:?}"
        );
        let dashboard: serde_json::Value =
            serde_json::from_str(FILES[0].1).expect("the dashboard is JSON");
        assert!(
            dashboard["panels"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
        );
        let rules: serde_json::Value =
            serde_saphyr::from_str(FILES[1].1).expect("the rules are YAML");
        assert_eq!(rules["kind"], "PrometheusRule");
    }
}
