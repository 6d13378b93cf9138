//! The committed `deploy/crds/` equal the generator's output, and that output reads back
//! as the generated objects.

use std::path::PathBuf;

use inplace_proto::crdgen;
use serde_json::Value;

fn crd_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/crds"))
}

#[test]
fn committed_crds_equal_generated() {
    let files = crdgen::render().expect("the CRDs render");
    let dir = crd_dir();
    let mut on_disk = std::collections::BTreeMap::new();
    for (name, _) in &files {
        on_disk.insert(name.clone(), std::fs::read_to_string(dir.join(name)).ok());
    }
    let extra: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("apps.kruise.io_") && n.ends_with(".yaml"))
                .filter(|n| !files.iter().any(|(f, _)| f == n))
                .collect()
        })
        .unwrap_or_default();
    let problems = crdgen::check(&files, &on_disk, &extra);
    assert!(
        problems.is_empty(),
        "deploy/crds is out of date with the Rust types; run `cargo run -p inplace-proto --bin inplace-crdgen` and commit the result:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn yaml_output_reads_back_as_the_generated_object() {
    for crd in super::generated() {
        let yaml = crd.to_yaml().expect("renders");
        assert!(yaml.starts_with(crdgen::HEADER));
        let back: Value = serde_saphyr::from_str(&yaml).expect("the YAML parses");
        assert_eq!(
            back, crd.crd,
            "{}: YAML does not read back identically",
            crd.kind
        );
    }
}

#[test]
fn rendering_is_deterministic() {
    assert_eq!(crdgen::render().ok(), crdgen::render().ok());
}

/// Client-side `kubectl apply` keeps the whole object (as JSON) in the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation; annotations are
/// limited to 256 KiB in total.
#[test]
fn crds_fit_the_last_applied_annotation() {
    for crd in super::generated() {
        let json = serde_json::to_string(&crd.crd).expect("serializes");
        assert!(
            json.len() < 200 * 1024,
            "{}: {} bytes as JSON; descriptions must stay stripped",
            crd.kind,
            json.len()
        );
    }
}

/// `default` is allowed, but only the reference's (tested in `defaults`).
#[test]
fn no_descriptions_in_schemas() {
    for crd in super::generated() {
        for node in super::schema_nodes(crd.schema().expect("schema")) {
            for key in ["description", "title", "nullable"] {
                assert!(
                    node.node.get(key).is_none(),
                    "{}: `{key}` left at {}",
                    crd.kind,
                    node.path
                );
            }
        }
    }
}
