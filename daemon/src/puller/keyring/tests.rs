use super::*;

#[test]
fn keys_of_locations() {
    for (location, key) in [
        ("https://index.docker.io/v1/", "index.docker.io"),
        ("index.docker.io", "index.docker.io"),
        ("http://reg.example:5000", "reg.example:5000"),
        ("reg.example:5000/", "reg.example:5000"),
        ("https://reg.example/v2/", "reg.example"),
        ("https://reg.example/v2/team/app", "reg.example/team/app"),
        ("reg.example/team", "reg.example/team"),
        ("reg.example/v1", "reg.example/v1"),
        ("*.azurecr.io", "*.azurecr.io"),
        ("reg.example/team?x=1", "reg.example/team"),
    ] {
        assert_eq!(key_of(location), key, "{location}");
    }
}

/// `URLsMatch`: same port, as many host parts, each a glob match, path a prefix.
#[test]
fn keys_against_images() {
    for (key, image, want) in [
        ("reg.example", "reg.example/a/b", true),
        ("reg.example", "other.example/a/b", false),
        ("reg.example", "reg.example:5000/a", false),
        ("reg.example:5000", "reg.example:5000/a", true),
        ("reg.example:5000", "reg.example:5001/a", false),
        ("reg.example:5000", "reg.example/a", false),
        ("127.0.0.1:5000", "127.0.0.1:5000/inplace-test/app", true),
        ("*.azurecr.io", "team.azurecr.io/app", true),
        ("*.azurecr.io", "azurecr.io/app", false),
        ("*.io", "team.azurecr.io/app", false),
        ("*.*.registry.io", "a.b.registry.io/app", true),
        ("k8s.*.io", "k8s.gcr.io/pause", true),
        ("k8s.*", "k8s.io/pause", true),
        ("app*.k8s.io", "app-123.k8s.io/x", true),
        ("app*.k8s.io", "web.k8s.io/x", false),
        // `?` starts a URL's query (Go's url.Parse): no single-character glob in a host
        ("re?.example", "reg.example/x", false),
        ("re[a-h].example", "reg.example/x", true),
        ("re[^a-h].example", "reg.example/x", false),
        ("re[].example", "reg.example/x", false),
        ("reg.example/team", "reg.example/team/app", true),
        ("reg.example/team", "reg.example/teamx/app", true),
        ("reg.example/team", "reg.example/other/app", false),
        ("reg.example/team/app", "reg.example/team", false),
        ("docker.io", "docker.io/library/nginx", true),
        ("index.docker.io", "docker.io/library/nginx", false),
        ("[::1]:5000", "[::1]:5000/a", true),
        ("[::1]:5000", "[::1]:5001/a", false),
    ] {
        assert_eq!(key_matches(key, image), want, "{key} vs {image}");
    }
}

#[test]
fn docker_hub_by_name() {
    for (image, want) in [
        ("docker.io/library/nginx", true),
        ("index.docker.io/x/y", true),
        ("library/nginx", true),
        ("nginx", true),
        ("localhost/a", true),
        ("localhost:5000/a", false),
        ("reg.example/a", false),
        ("", false),
    ] {
        assert_eq!(is_docker_hub(image), want, "{image}");
    }
}

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| (*k).to_owned()).collect()
}

/// `Lookup`: every applying key, in reverse string order (the more specific path
/// first); the Docker Hub entry only when nothing else applies.
#[test]
fn lookup_order_and_the_docker_hub_fallback() {
    let k = keys(&[
        "reg.example",
        "reg.example/team",
        "*.example",
        "index.docker.io",
        "docker.io",
    ]);
    let names = |idx: Vec<usize>| idx.into_iter().map(|i| k[i].clone()).collect::<Vec<_>>();
    assert_eq!(
        names(lookup(&k, "reg.example/team/app")),
        ["reg.example/team", "reg.example", "*.example"]
    );
    assert_eq!(
        names(lookup(&k, "reg.example/other")),
        ["reg.example", "*.example"]
    );
    assert_eq!(names(lookup(&k, "docker.io/library/nginx")), ["docker.io"]);
    let hub_only = keys(&["index.docker.io", "reg.example"]);
    assert_eq!(lookup(&hub_only, "docker.io/library/nginx"), [0]);
    assert!(lookup(&hub_only, "quay.io/a/b").is_empty());
    // duplicated keys (two entries, one location after normalising) are both kept
    let dup = keys(&["reg.example", "reg.example"]);
    assert_eq!(lookup(&dup, "reg.example/a"), [0, 1]);
}

/// Globs as Go's `filepath.Match` reads them, and no pattern is slow.
#[test]
fn globs() {
    for (pattern, text, want) in [
        ("*", "", true),
        ("*", "abc", true),
        ("a*c", "abbbc", true),
        ("a*c", "abbb", false),
        ("a*b*c", "axxbyyc", true),
        ("?", "a", true),
        ("?", "", false),
        ("[a-c]x", "bx", true),
        ("[^a-c]x", "bx", false),
        ("[abc-]", "a", false), // a bare `-` in a class is malformed
        ("[]", "a", false),
        ("[a", "a", false),
        ("\\*", "*", true),
        ("\\*", "a", false),
        ("a\\", "a", false),
    ] {
        assert_eq!(
            glob_match(pattern.as_bytes(), text.as_bytes()),
            want,
            "{pattern} vs {text}"
        );
    }
    let pattern = "*a".repeat(40);
    let text = "a".repeat(60) + "b";
    let start = std::time::Instant::now();
    assert!(!glob_match(pattern.as_bytes(), text.as_bytes()));
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}
