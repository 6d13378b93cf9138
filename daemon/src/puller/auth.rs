//! Pull credentials: docker config JSON (the `.dockerconfigjson` / `.dockercfg` key of a
//! pull Secret) to CRI `AuthConfig`s for one image (entries chosen as the kubelet chooses
//! them, [`super::keyring`]), and image reference checks.

use std::collections::BTreeMap;

use k8s_cri::v1::AuthConfig;
use serde::Deserialize;

use super::keyring;

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
    pub reason: inplace_proto::image_ref::ImageRefError,
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

/// Registry host of an image name (`docker.io` for Docker Hub, as
/// [`inplace_proto::image_ref`] normalises it; also for a name that is no reference).
pub fn registry_of(image: &str) -> String {
    inplace_proto::image_ref::ImageRef::parse(image).map_or_else(
        |_| "docker.io".to_owned(),
        |r| normalize_registry(r.registry()).to_owned(),
    )
}

fn normalize_registry(host: &str) -> &str {
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io",
        h => h,
    }
}

/// The repository of an image as the kubelet looks pull secrets up for it: registry and
/// path, no tag or digest (`docker.io/library/nginx`); a name that is no reference as it is.
pub fn repository_of(image: &str) -> String {
    inplace_proto::image_ref::ImageRef::parse(image).map_or_else(
        |_| image.to_owned(),
        |r| format!("{}/{}", normalize_registry(r.registry()), r.repository()),
    )
}

/// The credentials in one Secret's data that apply to `image`, most specific first, by
/// the kubelet's rules ([`keyring`]: host globs, port, path prefixes, the Docker Hub entry).
/// `server_address` is left empty, as the kubelet leaves it: containerd's CRI url.Parses a
/// non-empty one and uses the credentials only if its URL host is the host contacted, and
/// a bare `host:port` is no URL with a host (`127.0.0.1:5000` does not even parse).
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
    let entries: Vec<(&String, &DockerAuth)> = auths.iter().collect();
    let keys: Vec<String> = entries.iter().map(|(k, _)| keyring::key_of(k)).collect();
    Ok(keyring::lookup(&keys, &repository_of(image))
        .into_iter()
        .filter_map(|i| entries.get(i))
        .map(|(_, a)| AuthConfig {
            username: a.username.clone(),
            password: a.password.clone(),
            auth: a.auth.clone(),
            server_address: String::new(),
            identity_token: a.identity_token.clone(),
            registry_token: a.registry_token.clone(),
        })
        .collect())
}

/// Rejects references no runtime can pull, with a reason a person understands. Lenient
/// on purpose: whatever passes is left to the runtime, whose message is then reported.
pub fn check_reference(reference: &str) -> Result<(), ReferenceError> {
    inplace_proto::image_ref::ImageRef::parse(reference)
        .map(|_| ())
        .map_err(|e| ReferenceError {
            reference: reference.into(),
            reason: e,
        })
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
        assert_eq!(
            c[0].server_address, "",
            "as the kubelet: containerd matches no bare host"
        );
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
