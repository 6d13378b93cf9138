//! Pull credentials: docker config JSON (the `.dockerconfigjson` / `.dockercfg` key of a
//! pull Secret) to CRI `AuthConfig`s for one image, and image reference checks.

use std::collections::BTreeMap;

use k8s_cri::v1::AuthConfig;
use serde::Deserialize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("secret {0} has neither .dockerconfigjson nor .dockercfg")]
    NoDockerConfig(String),
    #[error("secret {secret}: docker config is not valid JSON: {reason}")]
    BadJson { secret: String, reason: String },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ReferenceError {
    pub reference: String,
    pub reason: &'static str,
}

#[derive(Debug, Default, Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(Debug, Default, Deserialize, Clone)]
struct DockerAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
    #[serde(default, alias = "identityToken", alias = "identitytoken")]
    identity_token: String,
    #[serde(default, alias = "registryToken", alias = "registrytoken")]
    registry_token: String,
}

/// Registry host of an image name (`docker.io` when the first component is no host).
pub fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            normalize_registry(first)
        }
        _ => "docker.io",
    }
}

fn normalize_registry(host: &str) -> &str {
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io",
        h => h,
    }
}

/// Host part of a docker config key (`https://index.docker.io/v1/`, `reg:5000`, ...).
fn key_host(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    normalize_registry(k.split('/').next().unwrap_or(k))
}

/// The credentials in one Secret's data that apply to `image`, most specific first.
pub fn credentials_for(
    image: &str,
    secret: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<AuthConfig>, AuthError> {
    let auths: BTreeMap<String, DockerAuth> = if let Some(raw) = data.get(".dockerconfigjson") {
        serde_json::from_slice::<DockerConfigJson>(raw)
            .map_err(|e| AuthError::BadJson {
                secret: secret.into(),
                reason: e.to_string(),
            })?
            .auths
    } else if let Some(raw) = data.get(".dockercfg") {
        serde_json::from_slice(raw).map_err(|e| AuthError::BadJson {
            secret: secret.into(),
            reason: e.to_string(),
        })?
    } else {
        return Err(AuthError::NoDockerConfig(secret.into()));
    };
    let want = registry_of(image);
    Ok(auths
        .iter()
        .filter(|(k, _)| key_host(k) == want)
        .map(|(k, a)| AuthConfig {
            username: a.username.clone(),
            password: a.password.clone(),
            auth: a.auth.clone(),
            server_address: key_host(k).to_string(),
            identity_token: a.identity_token.clone(),
            registry_token: a.registry_token.clone(),
        })
        .collect())
}

/// Rejects references no runtime can pull, with a reason a person understands. Lenient
/// on purpose: whatever passes is left to the runtime, whose message is then reported.
pub fn check_reference(reference: &str) -> Result<(), ReferenceError> {
    let err = |reason| {
        Err(ReferenceError {
            reference: reference.into(),
            reason,
        })
    };
    if reference.is_empty() {
        return err("empty");
    }
    if reference.len() > 4096 {
        return err("longer than 4096 characters");
    }
    if reference
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return err("contains whitespace or control characters");
    }
    let (name, _digest) = match reference.split_once('@') {
        Some((n, d)) => {
            if !d.contains(':') {
                return err("digest must look like algorithm:hex");
            }
            (n, Some(d))
        }
        None => (reference, None),
    };
    // split the tag off the last path component only (a registry port has a colon too)
    let (path, tag) = match name.rsplit_once('/') {
        Some((head, last)) => match last.split_once(':') {
            Some((repo, tag)) => (format!("{head}/{repo}"), Some(tag)),
            None => (name.to_string(), None),
        },
        None => match name.split_once(':') {
            Some((repo, tag)) => (repo.to_string(), Some(tag)),
            None => (name.to_string(), None),
        },
    };
    if let Some(t) = tag {
        let ok = !t.is_empty()
            && t.len() <= 128
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            && !t.starts_with(['.', '-']);
        if !ok {
            return err("tag must be 1-128 of [A-Za-z0-9_.-], not starting with . or -");
        }
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    if parts.len() > 1 && registry_of(&path) != "docker.io" || parts.first() == Some(&"docker.io") {
        parts.remove(0);
    }
    if parts.is_empty() || parts.iter().any(|p| p.is_empty()) {
        return err("empty path component");
    }
    for p in parts {
        let ok = p
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
            && p.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && p.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !ok {
            return err("repository path components must be lowercase [a-z0-9] joined by . _ -");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(key: &str, json: &str) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(key.to_string(), json.as_bytes().to_vec())])
    }

    #[test]
    fn registry_of_images() {
        for (img, reg) in [
            ("nginx", "docker.io"),
            ("library/nginx", "docker.io"),
            ("docker.io/library/nginx", "docker.io"),
            ("index.docker.io/x/y", "docker.io"),
            ("127.0.0.1:5000/inplace-test/app", "127.0.0.1:5000"),
            ("localhost/a", "localhost"),
            ("ghcr.io/o/r", "ghcr.io"),
        ] {
            assert_eq!(registry_of(img), reg, "{img}");
        }
    }

    #[test]
    fn dockerconfigjson_matches_by_registry() -> Result<(), AuthError> {
        let d = data(
            ".dockerconfigjson",
            r#"{"auths":{"https://index.docker.io/v1/":{"auth":"dTpw"},
                "127.0.0.1:5000":{"username":"u","password":"p"},
                "other.example":{"username":"x"}}}"#,
        );
        let c = credentials_for("127.0.0.1:5000/a/b", "ns/s", &d)?;
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].username.as_str(), c[0].password.as_str()), ("u", "p"));
        assert_eq!(c[0].server_address, "127.0.0.1:5000");
        let h = credentials_for("nginx", "ns/s", &d)?;
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].auth, "dTpw");
        assert!(credentials_for("quay.io/a/b", "ns/s", &d)?.is_empty());
        Ok(())
    }

    #[test]
    fn legacy_dockercfg() -> Result<(), AuthError> {
        let d = data(".dockercfg", r#"{"reg.example":{"auth":"eDp5"}}"#);
        assert_eq!(credentials_for("reg.example/a", "s", &d)?[0].auth, "eDp5");
        Ok(())
    }

    #[test]
    fn bad_secrets() {
        assert_eq!(
            credentials_for("a", "ns/s", &BTreeMap::new()),
            Err(AuthError::NoDockerConfig("ns/s".into()))
        );
        assert!(matches!(
            credentials_for("a", "ns/s", &data(".dockerconfigjson", "{nope")),
            Err(AuthError::BadJson { .. })
        ));
    }

    #[test]
    fn references() {
        for ok in [
            "nginx:1.25",
            "nginx",
            "docker.io/library/nginx:latest",
            "127.0.0.1:5000/inplace-test/app:v1",
            "localhost:5000/a/b",
            "r/a@sha256:0123abcd",
            "my-reg.example/x_y/z.w:V1.2-rc_3",
        ] {
            assert_eq!(check_reference(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Nginx:1",
            "nginx:",
            "nginx: 1",
            "a//b:1",
            "127.0.0.1:5000/App:v1",
            "r/a@nodigest",
            "r/a:-x",
            "UPPER/case",
            "r/a:t$g",
        ] {
            assert!(check_reference(bad).is_err(), "{bad}");
        }
    }
}
