//! The downward API's per-key metadata field paths, which both sides read: the controller
//! to find the containers whose env a label or annotation change reaches, the daemon to
//! compare a running container's env with the pod's metadata.

/// `metadata.labels['k']` → `("labels", "k")`, and the same for annotations. The quotes may
/// be single or double; these are the only per-key forms the downward API accepts.
pub fn metadata_key(path: &str) -> Option<(&'static str, &str)> {
    let (field, rest) = if let Some(rest) = path.strip_prefix("metadata.labels[") {
        ("labels", rest)
    } else {
        ("annotations", path.strip_prefix("metadata.annotations[")?)
    };
    let inner = rest.strip_suffix(']')?;
    let key = inner
        .strip_prefix('\'')
        .and_then(|k| k.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|k| k.strip_suffix('"')))?;
    Some((field, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_paths_are_read_and_anything_else_is_not() {
        let cases = [
            ("metadata.labels['tier']", Some(("labels", "tier"))),
            ("metadata.labels['a/b']", Some(("labels", "a/b"))),
            (
                "metadata.annotations[\"example.io/x\"]",
                Some(("annotations", "example.io/x")),
            ),
            ("metadata.labels", None),
            ("metadata.name", None),
            ("metadata.labels[tier]", None),
            ("metadata.labels['tier'", None),
            ("metadata.labels['unterminated", None),
        ];
        for (path, want) in cases {
            assert_eq!(metadata_key(path), want, "{path}");
        }
    }
}
