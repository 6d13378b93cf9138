//! A thin CRI v1 client over a unix socket: endpoint discovery, typed errors, and a
//! deadline on every call.
//!
//! Every RPC but `PullImage` gets the runtime timeout (5 s by default, as the reference
//! daemon). `PullImage` takes the caller's deadline: containerd 1.6 has no pull timeout of
//! its own, so the future is dropped when the deadline passes, which resets the HTTP/2
//! stream and cancels the pull's context inside containerd.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    AuthConfig, Container, ContainerFilter, ContainerStatus, ContainerStatusRequest,
    ExecSyncRequest, ExecSyncResponse, Image, ImageSpec, ImageStatusRequest,
    LinuxContainerResources, ListContainersRequest, PodSandboxConfig, PullImageRequest,
    StopContainerRequest, UpdateContainerResourcesRequest, VersionRequest, VersionResponse,
};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Socket names tried, in order, under each of [`DEFAULT_SOCKET_DIRS`].
pub const DEFAULT_SOCKET_NAMES: [&str; 4] = [
    "containerd.sock",
    "containerd/containerd.sock",
    "crio.sock",
    "crio/crio.sock",
];
/// Directories searched for the runtime socket.
pub const DEFAULT_SOCKET_DIRS: [&str; 2] = ["/run", "/var/run"];

/// Largest message accepted from the runtime (the reference uses 16 MiB too).
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// CRI failures. `Rpc` carries the runtime's own status so its message can be reported.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("no CRI socket found; tried: {}", .tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NoEndpoint { tried: Vec<PathBuf> },
    #[error(
        "invalid CRI endpoint {0:?}: only unix:// endpoints or absolute socket paths are supported"
    )]
    BadEndpoint(String),
    #[error("cannot build a channel for {path}: {source}")]
    Channel {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("{op}: {}: {}", .status.code(), .status.message())]
    Rpc {
        op: &'static str,
        status: tonic::Status,
    },
    #[error("{op}: no answer from the runtime within {after:?}")]
    Timeout { op: &'static str, after: Duration },
    #[error("{op}: the runtime answered without the expected {what}")]
    Malformed {
        op: &'static str,
        what: &'static str,
    },
}

impl CriError {
    /// The gRPC code, when the runtime answered with an error.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Rpc { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    /// Whether the call's outcome is unknown: the runtime could not be reached, or the
    /// connection failed before its answer came (a runtime restarting, a cut socket), so
    /// the call may or may not have been carried out. An error the runtime itself answered
    /// (any code, `Unknown` included) is its verdict, known.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            CriError::Timeout { .. } | CriError::Channel { .. } => true,
            CriError::Rpc { status, .. } => match status.code() {
                tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled => true,
                // tonic reports a failed transport (the connection reset, an h2 error)
                // as `Unknown` with the transport's error as its source; an `Unknown` the
                // runtime sent has none.
                tonic::Code::Unknown => std::error::Error::source(status).is_some(),
                _ => false,
            },
            CriError::NoEndpoint { .. } | CriError::BadEndpoint(_) | CriError::Malformed { .. } => {
                false
            }
        }
    }

    /// The runtime's message as reported to users: `<Code>: <runtime message>`, or this
    /// error's text when the runtime said nothing.
    pub fn runtime_message(&self) -> String {
        match self {
            CriError::Rpc { status, .. } => format!("{:?}: {}", status.code(), status.message()),
            other => other.to_string(),
        }
    }
}

/// Turns `unix:///x`, `unix:/x` or `/x` into a socket path.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    if path.starts_with('/') && !path.contains('\0') {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::BadEndpoint(endpoint.to_string()))
    }
}

/// Every path auto-detection looks at, in order.
pub fn candidate_sockets<D: AsRef<Path>>(dirs: &[D]) -> Vec<PathBuf> {
    dirs.iter()
        .flat_map(|d| DEFAULT_SOCKET_NAMES.iter().map(move |n| d.as_ref().join(n)))
        .collect()
}

/// Picks the endpoint: the explicit one when given, else the first candidate for which
/// `exists` holds. Pure apart from `exists`.
pub fn resolve_endpoint<D: AsRef<Path>>(
    explicit: Option<&str>,
    dirs: &[D],
    exists: impl Fn(&Path) -> bool,
) -> Result<PathBuf, CriError> {
    if let Some(e) = explicit {
        return parse_endpoint(e);
    }
    let tried = candidate_sockets(dirs);
    tried
        .iter()
        .find(|p| exists(p))
        .cloned()
        .ok_or(CriError::NoEndpoint { tried })
}

/// True when `p` is a unix socket.
pub fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p)
        .map(|m| m.file_type().is_socket())
        .unwrap_or(false)
}

/// A cloneable CRI client (runtime + image service on one channel).
#[derive(Clone, Debug)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    timeout: Duration,
    socket: PathBuf,
}

async fn call<T>(
    op: &'static str,
    after: Duration,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, CriError> {
    match tokio::time::timeout(after, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(CriError::Rpc { op, status }),
        Err(_) => Err(CriError::Timeout { op, after }),
    }
}

impl CriClient {
    /// A client for the socket at `socket`. The connection is made lazily and re-made
    /// after the runtime restarts, so this never fails because the runtime is down.
    pub fn new(socket: &Path, timeout: Duration) -> Result<Self, CriError> {
        let path = socket.to_path_buf();
        let dial = path.clone();
        let channel =
            Endpoint::try_from("http://[::]:50051")
                .map_err(|source| CriError::Channel {
                    path: path.clone(),
                    source,
                })?
                .connect_timeout(Duration::from_secs(30))
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let dial = dial.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(dial).await?))
                    }
                }));
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            image: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES),
            timeout,
            socket: path,
        })
    }

    /// The raw runtime service client (benchmarks and tests drive sandboxes with it).
    pub fn runtime_client(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub async fn version(&self) -> Result<VersionResponse, CriError> {
        let mut c = self.runtime.clone();
        call(
            "Version",
            self.timeout,
            c.version(VersionRequest {
                version: "v1".into(),
            }),
        )
        .await
    }

    /// Pulls `image`; returns the runtime's image reference (its image id).
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        sandbox: Option<PodSandboxConfig>,
        deadline: Duration,
    ) -> Result<String, CriError> {
        let mut c = self.image.clone();
        let r = call(
            "PullImage",
            deadline,
            c.pull_image(PullImageRequest {
                image: Some(image_spec(image)),
                auth,
                sandbox_config: sandbox,
            }),
        )
        .await?;
        Ok(r.image_ref)
    }

    /// The image as the runtime knows it, or `None` when it is not present.
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, CriError> {
        let mut c = self.image.clone();
        let r = call(
            "ImageStatus",
            self.timeout,
            c.image_status(ImageStatusRequest {
                image: Some(image_spec(image)),
                verbose: false,
            }),
        )
        .await?;
        Ok(r.image)
    }

    /// Containers whose labels include all of `labels`.
    pub async fn list_containers(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Container>, CriError> {
        let mut c = self.runtime.clone();
        let r = call(
            "ListContainers",
            self.timeout,
            c.list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    label_selector: labels,
                    ..Default::default()
                }),
            }),
        )
        .await?;
        Ok(r.containers)
    }

    pub async fn container_status(&self, id: &str) -> Result<ContainerStatus, CriError> {
        let mut c = self.runtime.clone();
        let r = call(
            "ContainerStatus",
            self.timeout,
            c.container_status(ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            }),
        )
        .await?;
        r.status.ok_or(CriError::Malformed {
            op: "ContainerStatus",
            what: "status",
        })
    }

    /// `ContainerStatus` with the runtime's verbose info (containerd: the OCI spec).
    pub async fn container_status_verbose(
        &self,
        id: &str,
    ) -> Result<(ContainerStatus, HashMap<String, String>), CriError> {
        let mut c = self.runtime.clone();
        let r = call(
            "ContainerStatus",
            self.timeout,
            c.container_status(ContainerStatusRequest {
                container_id: id.into(),
                verbose: true,
            }),
        )
        .await?;
        let status = r.status.ok_or(CriError::Malformed {
            op: "ContainerStatus",
            what: "status",
        })?;
        Ok((status, r.info))
    }

    /// Stops a container, giving it `grace` to exit after SIGTERM.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let secs = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
        call(
            "StopContainer",
            self.timeout + grace,
            c.stop_container(StopContainerRequest {
                container_id: id.into(),
                timeout: secs,
            }),
        )
        .await?;
        Ok(())
    }

    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        limit: Duration,
    ) -> Result<ExecSyncResponse, CriError> {
        let mut c = self.runtime.clone();
        let secs = i64::try_from(limit.as_secs().max(1)).unwrap_or(i64::MAX);
        call(
            "ExecSync",
            limit + self.timeout,
            c.exec_sync(ExecSyncRequest {
                container_id: id.into(),
                cmd,
                timeout: secs,
            }),
        )
        .await
    }

    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: LinuxContainerResources,
    ) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        call(
            "UpdateContainerResources",
            self.timeout,
            c.update_container_resources(UpdateContainerResourcesRequest {
                container_id: id.into(),
                linux: Some(linux),
                ..Default::default()
            }),
        )
        .await?;
        Ok(())
    }
}

fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_is_unknown_when_the_runtime_was_not_reached_or_its_answer_lost() {
        let rpc = |status| CriError::Rpc {
            op: "StopContainer",
            status,
        };
        let transport = || {
            tonic::Status::from_error(Box::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset",
            )))
        };
        assert_eq!(transport().code(), tonic::Code::Unknown);
        let cases = [
            ("a transport error", rpc(transport()), true),
            (
                "unavailable",
                rpc(tonic::Status::unavailable("connect")),
                true,
            ),
            (
                "deadline",
                rpc(tonic::Status::deadline_exceeded("late")),
                true,
            ),
            ("cancelled", rpc(tonic::Status::cancelled("gone")), true),
            (
                "no answer in time",
                CriError::Timeout {
                    op: "StopContainer",
                    after: Duration::from_secs(1),
                },
                true,
            ),
            (
                "the runtime's own Unknown",
                rpc(tonic::Status::unknown("failed to kill")),
                false,
            ),
            (
                "not found",
                rpc(tonic::Status::not_found("no such container")),
                false,
            ),
            ("internal", rpc(tonic::Status::internal("boom")), false),
            (
                "malformed",
                CriError::Malformed {
                    op: "ContainerStatus",
                    what: "status",
                },
                false,
            ),
        ];
        for (case, err, unknown) in cases {
            assert_eq!(err.outcome_unknown(), unknown, "{case}");
        }
    }

    #[test]
    fn endpoints_parse() {
        let cases = [
            (
                "unix:///run/containerd/containerd.sock",
                Some("/run/containerd/containerd.sock"),
            ),
            ("unix:/run/x.sock", Some("/run/x.sock")),
            ("/var/run/crio/crio.sock", Some("/var/run/crio/crio.sock")),
            ("tcp://127.0.0.1:1", None),
            ("relative.sock", None),
            ("", None),
        ];
        for (input, want) in cases {
            let got = parse_endpoint(input).ok();
            assert_eq!(got.as_deref(), want.map(Path::new), "{input}");
        }
    }

    #[test]
    fn auto_detection_takes_the_first_existing_candidate() {
        let dirs = ["/run", "/var/run"];
        let got = resolve_endpoint(None, &dirs, |p| {
            p == Path::new("/var/run/crio/crio.sock") || p == Path::new("/run/crio.sock")
        });
        assert_eq!(got.ok(), Some(PathBuf::from("/run/crio.sock")));
    }

    #[test]
    fn explicit_endpoint_wins_even_if_missing() {
        let got = resolve_endpoint(Some("unix:///x/y.sock"), &["/run"], |_| true);
        assert_eq!(got.ok(), Some(PathBuf::from("/x/y.sock")));
    }

    #[test]
    fn nothing_found_lists_every_path_tried() {
        let err = resolve_endpoint(None, &["/run", "/var/run"], |_| false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "no CRI socket found; tried: /run/containerd.sock, /run/containerd/containerd.sock, \
             /run/crio.sock, /run/crio/crio.sock, /var/run/containerd.sock, \
             /var/run/containerd/containerd.sock, /var/run/crio.sock, /var/run/crio/crio.sock"
        );
    }
}
