//! What the API server offers, found out at start instead of assumed.
//!
//! The test bed runs Kubernetes v1.20 (no `pods/resize`, no CEL); current clusters serve
//! `pods/resize`. The controller reads the server version and the core resource list once.

use kube::Client;

/// Capabilities of the API server that change what the controller may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerCapabilities {
    /// `gitVersion` as reported by `/version`.
    pub git_version: String,
    pub major: u32,
    pub minor: u32,
    /// The `pods/resize` subresource is served (in-place cpu/memory changes go through it).
    pub pod_resize: bool,
    /// `events.k8s.io/v1` is served (the event recorder needs it).
    pub events_v1: bool,
    /// `coordination.k8s.io/v1` is served (leader election needs it).
    pub leases_v1: bool,
}

impl ServerCapabilities {
    /// Whether the server is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

/// Parses the leading digits of a version component ("20+" → 20).
pub fn parse_version_part(raw: &str) -> u32 {
    let digits: String = raw.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

/// Asks the server for its version and the resources we care about.
pub async fn discover(client: &Client) -> Result<ServerCapabilities, kube::Error> {
    let info = client.apiserver_version().await?;
    let core = client.list_core_api_resources("v1").await?;
    let pod_resize = core.resources.iter().any(|r| r.name == "pods/resize");
    let groups = client.list_api_groups().await?;
    let serves = |group: &str, version: &str| {
        groups
            .groups
            .iter()
            .any(|g| g.name == group && g.versions.iter().any(|v| v.version == version))
    };
    Ok(ServerCapabilities {
        git_version: info.git_version.clone(),
        major: parse_version_part(&info.major),
        minor: parse_version_part(&info.minor),
        pod_resize,
        events_v1: serves("events.k8s.io", "v1"),
        leases_v1: serves("coordination.k8s.io", "v1"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parts_parse_like_kubectl() {
        assert_eq!(parse_version_part("20"), 20);
        assert_eq!(parse_version_part("20+"), 20);
        assert_eq!(parse_version_part(""), 0);
        let caps = ServerCapabilities {
            major: 1,
            minor: 20,
            ..Default::default()
        };
        assert!(caps.at_least(1, 20));
        assert!(!caps.at_least(1, 27));
    }
}
