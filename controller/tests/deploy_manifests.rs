//! The manifests under `deploy/`: every plain YAML document parses and names a kind and an
//! apiVersion, the kustomizations take every object file, the Helm chart's `files/crds/`
//! (its CRD templates' source) equals `deploy/crds/` byte for byte, the ClusterRoles grant what each binary calls (tables below,
//! read from the code), and the controller Deployment and daemon DaemonSet keep their HA and
//! least-privilege settings.
//!
//! Helm templates (`deploy/chart/*/templates/`) are not parsed here: `tests/chart/check`
//! renders them with real Helm 3 and 4 and compares them with the kustomize output.
//!
//! The server-side dry run (of `kubectl kustomize deploy/k8s-1.20`) needs the test bed:
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test deploy_manifests -- --ignored
//! ```
//! (kubectl: `INPLACE_KUBECTL`, else the `INPLACE_KUBECTL` line of
//! `/var/tmp/inplace-testbed/env`, else `kubectl` on PATH.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every `.yaml`/`.yml` file under `dir`, recursively, skipping Helm `templates/` folders.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "templates") {
                continue;
            }
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}

/// Kubernetes objects: files under `deploy/` except the chart's `Chart.yaml`/`values.yaml`,
/// kustomizations and kustomize patches (`*.patch.yaml`).
fn object_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    files
        .into_iter()
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !(name == "Chart.yaml"
                || name == "values.yaml"
                || name == "kustomization.yaml"
                || name.ends_with(".patch.yaml"))
        })
        .collect()
}

fn parse_one(path: &Path) -> Value {
    let mut docs = parse_docs(path);
    assert_eq!(docs.len(), 1, "{}: one document expected", path.display());
    docs.remove(0)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Every object directory is a kustomize base (`Kustomization`, no `.yaml`, so that
/// `kubectl apply -f DIR/` and the CRD generator see only objects) that lists exactly its
/// YAML files, and `deploy/kustomization.yaml` takes every such directory: a new file or
/// CRD cannot be left out of `kubectl apply -k deploy/`.
#[test]
fn kustomizations_list_every_object_file() {
    let top = parse_one(&deploy_dir().join("kustomization.yaml"));
    let bases: BTreeSet<String> = strings(&top["bases"]).into_iter().collect();
    for dir in ["crds", "controller", "daemon", "pdb", "pdb-v1beta1"] {
        assert!(
            dir == "pdb-v1beta1" || bases.contains(dir),
            "deploy/kustomization.yaml lacks {dir}"
        );
        let kust = ["Kustomization", "kustomization.yaml"]
            .iter()
            .map(|n| deploy_dir().join(dir).join(n))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no kustomization in deploy/{dir}"));
        let listed: BTreeSet<String> = strings(&parse_one(&kust)["resources"])
            .into_iter()
            .collect();
        let on_disk: BTreeSet<String> = std::fs::read_dir(deploy_dir().join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
            .collect();
        assert_eq!(
            listed,
            on_disk,
            "{} vs the files in deploy/{dir}",
            kust.display()
        );
    }
    // The 1.20 variant takes the same bases but for the PodDisruptionBudget's.
    let old = parse_one(&deploy_dir().join("k8s-1.20/kustomization.yaml"));
    let old_bases: BTreeSet<String> = strings(&old["bases"])
        .into_iter()
        .map(|b| b.trim_start_matches("../").replace("pdb-v1beta1", "pdb"))
        .collect();
    assert_eq!(
        old_bases, bases,
        "deploy/k8s-1.20 takes other bases than deploy/"
    );
}

/// deploy/pdb-v1beta1 (Kubernetes 1.20) is deploy/pdb in another API version, nothing else.
#[test]
fn the_1_20_pod_disruption_budget_differs_only_in_its_version() {
    let mut current = parse_one(&deploy_dir().join("pdb/pdb.yaml"));
    let mut old = parse_one(&deploy_dir().join("pdb-v1beta1/pdb.yaml"));
    assert_eq!(current["apiVersion"], "policy/v1");
    assert_eq!(old["apiVersion"], "policy/v1beta1");
    current["apiVersion"] = Value::Null;
    old["apiVersion"] = Value::Null;
    assert_eq!(current, old);
}

fn workload(file: &str, kind: &str) -> Value {
    parse_docs(&deploy_dir().join(file))
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/{file}"))
}

/// HA: two replicas that are all Ready when they serve (the probe is /readyz, which a
/// standby answers with 200), a surge-first rolling update, spread over nodes, and a
/// PodDisruptionBudget over the same pods.
#[test]
fn controller_deployment_is_highly_available() {
    let deploy = workload("controller/deployment.yaml", "Deployment");
    let spec = &deploy["spec"];
    assert!(spec["replicas"].as_i64().unwrap_or(0) >= 2);
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &spec["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    let labels = &spec["selector"]["matchLabels"];
    let anti = &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["podAffinityTerm"];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(&anti["labelSelector"]["matchLabels"], labels);
    let pdb = workload("pdb/pdb.yaml", "PodDisruptionBudget");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(
        pdb["metadata"]["namespace"],
        deploy["metadata"]["namespace"]
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
}

fn parse_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn all_objects() -> Vec<(PathBuf, Value)> {
    object_files()
        .into_iter()
        .flat_map(|p| parse_docs(&p).into_iter().map(move |d| (p.clone(), d)))
        .collect()
}

#[test]
fn every_document_has_a_kind_and_an_api_version() {
    let objects = all_objects();
    assert!(
        objects.len() >= 10,
        "only {} documents found",
        objects.len()
    );
    for (path, doc) in &objects {
        let kind = doc["kind"].as_str().unwrap_or("");
        let api = doc["apiVersion"].as_str().unwrap_or("");
        assert!(
            !kind.is_empty(),
            "{}: a document has no kind",
            path.display()
        );
        assert!(
            !api.is_empty(),
            "{}: {kind} has no apiVersion",
            path.display()
        );
        assert!(
            doc["metadata"]["name"]
                .as_str()
                .is_some_and(|n| !n.is_empty()),
            "{}: {kind} has no name",
            path.display()
        );
    }
    // The two binaries' workloads exist.
    let kinds: BTreeSet<(String, String)> = objects
        .iter()
        .map(|(_, d)| {
            (
                d["kind"].as_str().unwrap_or("").to_string(),
                d["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for (kind, name) in [
        ("Deployment", "inplace-controller"),
        ("DaemonSet", "inplace-daemon"),
        ("ClusterRole", "inplace-controller"),
        ("ClusterRole", "inplace-daemon"),
        ("ServiceAccount", "inplace-daemon"),
        ("ClusterRoleBinding", "inplace-daemon"),
        ("CustomResourceDefinition", "clonesets.apps.kruise.io"),
    ] {
        assert!(
            kinds.contains(&(kind.to_string(), name.to_string())),
            "no {kind} {name} under deploy/"
        );
    }
}

#[test]
fn chart_crds_equal_the_generated_crds() {
    let list = |dir: PathBuf| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&p).unwrap())
            })
            .collect()
    };
    let generated = list(deploy_dir().join("crds"));
    let chart = list(deploy_dir().join("chart/inplace/files/crds"));
    assert!(!generated.is_empty());
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "deploy/chart/inplace/files/crds/ lists other files than deploy/crds/ \
         (refresh: cp deploy/crds/*.yaml deploy/chart/inplace/files/crds/)"
    );
    for (name, bytes) in &generated {
        assert!(
            chart.get(name) == Some(bytes),
            "deploy/chart/inplace/files/crds/{name} differs from deploy/crds/{name} \
             (refresh: cp deploy/crds/*.yaml deploy/chart/inplace/files/crds/)"
        );
    }
}

/// What `inplace-controller` calls, read from controller/src: watch.rs (watchers on
/// CloneSets, Pods, PVCs, ControllerRevisions, Nodes), runtime/apply/ (pod/PVC/revision
/// create/delete/patch, pod status patch, CloneSet spec patch of podsToDelete),
/// runtime/status_writer.rs (CloneSet status merge patch), events.rs (kube Recorder: events.k8s.io
/// create/patch), imagepulljob/secrets.rs (the pull secrets jobs name, read by name),
/// launch_priority/mod.rs (the per-pod barrier ConfigMaps).
/// The Lease and the pull-secret copies are in namespaced Roles (checked below).
const CONTROLLER_USES: &[(&str, &str, &[&str])] = &[
    (
        "apps.kruise.io",
        "clonesets",
        &["get", "list", "watch", "patch"],
    ),
    ("apps.kruise.io", "clonesets/status", &["patch"]),
    (
        "",
        "pods",
        &["get", "list", "watch", "create", "delete", "patch"],
    ),
    ("", "pods/status", &["patch"]),
    (
        "",
        "persistentvolumeclaims",
        &["get", "list", "watch", "create", "delete", "patch"],
    ),
    (
        "apps",
        "controllerrevisions",
        &["get", "list", "watch", "create", "delete", "patch"],
    ),
    ("", "nodes", &["get", "list", "watch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
    ("", "secrets", &["get"]),
    // launch_priority/mod.rs: the per-pod barrier ConfigMap (read by name, created, a key
    // patched in, an earlier pod's deleted)
    ("", "configmaps", &["get", "create", "patch", "delete"]),
    // imagepulljob/mod.rs; runtime/predownload_jobs.rs (create, delete, watch; revision label patch above)
    (
        "apps.kruise.io",
        "imagepulljobs",
        &["list", "watch", "create", "delete"],
    ),
    ("apps.kruise.io", "imagepulljobs/status", &["patch"]),
    // imagepulljob/list.rs: the list jobs (TTL delete), their status; their ImagePullJobs above
    (
        "apps.kruise.io",
        "imagelistpulljobs",
        &["list", "watch", "delete"],
    ),
    ("apps.kruise.io", "imagelistpulljobs/status", &["patch"]),
    (
        "apps.kruise.io",
        "nodeimages",
        &["list", "watch", "create", "patch"],
    ),
    // imagepulljob/nodeimages.rs: the NodeImage lifecycle (replace spec, delete, status)
    (
        "apps.kruise.io",
        "nodeimages",
        &["list", "watch", "create", "update", "delete"],
    ),
    ("apps.kruise.io", "nodeimages/status", &["update"]),
    // crr/mod.rs: watch, fill in (patch), finalizer (patch), TTL (delete), status
    (
        "apps.kruise.io",
        "containerrecreaterequests",
        &["get", "list", "watch", "patch", "delete"],
    ),
    (
        "apps.kruise.io",
        "containerrecreaterequests/status",
        &["patch"],
    ),
];

/// What `inplace-daemon` calls, read from daemon/src: main.rs + kube_io.rs (watcher on
/// NodeImages with a name field selector; NodeImage status merge patch; Secret GET for
/// pull secrets, in inplace-system only: a Role, checked below), inplace/mod.rs (watcher on Pods with a
/// nodeName field selector; the state annotation and the condition both through
/// `pods/status`, so never `pods: patch`, which would let a node change any pod's spec),
/// crr/mod.rs (watcher on CRRs by label; CRR status merge patch), recorder.rs (kube
/// Recorder: events.k8s.io Events created, and patched when repeated).
const DAEMON_USES: &[(&str, &str, &[&str])] = &[
    ("apps.kruise.io", "nodeimages", &["list", "watch"]),
    ("apps.kruise.io", "nodeimages/status", &["patch"]),
    (
        "apps.kruise.io",
        "containerrecreaterequests",
        &["list", "watch"],
    ),
    (
        "apps.kruise.io",
        "containerrecreaterequests/status",
        &["patch"],
    ),
    ("", "pods", &["list", "watch"]),
    ("", "pods/status", &["patch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
];

/// (apiGroup, resource) → verbs granted by the rules of `role`.
fn grants(role: &Value) -> BTreeMap<(String, String), BTreeSet<String>> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                out.entry((g.clone(), r))
                    .or_default()
                    .extend(strings(&rule["verbs"]));
            }
        }
    }
    out
}

fn cluster_role(file: &str, name: &str) -> Value {
    parse_docs(&deploy_dir().join(file))
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no ClusterRole {name} in deploy/{file}"))
}

fn assert_grants(role: &Value, uses: &[(&str, &str, &[&str])]) {
    let granted = grants(role);
    let name = role["metadata"]["name"].as_str().unwrap_or("?");
    for (group, resource, verbs) in uses {
        let have = granted
            .get(&(group.to_string(), resource.to_string()))
            .cloned()
            .unwrap_or_default();
        for verb in *verbs {
            assert!(
                have.contains(*verb) || have.contains("*"),
                "ClusterRole {name} does not grant {verb} on {group}/{resource} (has {have:?})"
            );
        }
    }
}

#[test]
fn controller_cluster_role_grants_what_the_controller_calls() {
    let role = cluster_role("controller/rbac.yaml", "inplace-controller");
    assert_grants(&role, CONTROLLER_USES);
}

#[test]
fn daemon_cluster_role_grants_what_the_daemon_calls_and_no_more() {
    let role = cluster_role("daemon/rbac.yaml", "inplace-daemon");
    assert_grants(&role, DAEMON_USES);
    // Least privilege: every grant is in the table, give or take `get` (harmless next to
    // list). A new call in daemon/src needs a row above and a rule in deploy/daemon/.
    let used: BTreeMap<(String, String), BTreeSet<String>> = DAEMON_USES
        .iter()
        .map(|(g, r, v)| {
            let mut verbs: BTreeSet<String> = v.iter().map(|s| s.to_string()).collect();
            verbs.insert("get".into());
            ((g.to_string(), r.to_string()), verbs)
        })
        .collect();
    for (key, verbs) in grants(&role) {
        let allowed = used.get(&key).cloned().unwrap_or_default();
        let extra: Vec<_> = verbs.difference(&allowed).collect();
        assert!(
            extra.is_empty(),
            "ClusterRole inplace-daemon grants {extra:?} on {key:?}, which the daemon never uses"
        );
    }
}

fn role(file: &str, name: &str) -> Value {
    parse_docs(&deploy_dir().join(file))
        .into_iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no Role {name} in deploy/{file}"))
}

/// Secrets: the daemon reads (GET) only in the controller's namespace, the controller
/// reads the jobs' pull secrets by name anywhere (no list: it cannot enumerate them) and
/// writes their copies only in its own namespace; neither ClusterRole grants more.
#[test]
fn secrets_are_written_and_read_by_the_daemon_only_in_inplace_system() {
    let secrets = |g: &BTreeMap<(String, String), BTreeSet<String>>| {
        g.get(&(String::new(), "secrets".into()))
            .cloned()
            .unwrap_or_default()
    };
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let daemon = role("daemon/rbac.yaml", "inplace-daemon-pull-secrets");
    assert_eq!(daemon["metadata"]["namespace"], "inplace-system");
    assert_eq!(secrets(&grants(&daemon)), set(&["get"]));
    assert!(
        secrets(&grants(&cluster_role("daemon/rbac.yaml", "inplace-daemon"))).is_empty(),
        "the daemon reads no Secret outside inplace-system"
    );
    let controller = role("controller/rbac.yaml", "inplace-controller-pull-secrets");
    assert_eq!(controller["metadata"]["namespace"], "inplace-system");
    assert_eq!(
        secrets(&grants(&controller)),
        set(&["get", "list", "watch", "create", "update", "delete"])
    );
    assert_eq!(
        secrets(&grants(&cluster_role(
            "controller/rbac.yaml",
            "inplace-controller"
        ))),
        set(&["get"])
    );
    // Each Role is bound to its ServiceAccount in the same namespace.
    for (file, name, sa) in [
        (
            "daemon/rbac.yaml",
            "inplace-daemon-pull-secrets",
            "inplace-daemon",
        ),
        (
            "controller/rbac.yaml",
            "inplace-controller-pull-secrets",
            "inplace-controller",
        ),
    ] {
        let binding = parse_docs(&deploy_dir().join(file))
            .into_iter()
            .find(|d| d["kind"] == "RoleBinding" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no RoleBinding {name}"));
        assert_eq!(binding["metadata"]["namespace"], "inplace-system");
        assert_eq!(binding["roleRef"]["name"], name);
        assert_eq!(binding["subjects"][0]["name"], sa);
        assert_eq!(binding["subjects"][0]["namespace"], "inplace-system");
    }
}

#[test]
fn daemon_set_matches_the_daemon_binary() {
    let ds = workload("daemon/daemonset.yaml", "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["serviceAccountName"], "inplace-daemon");
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert!(
        pod["tolerations"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["operator"] == "Exists" && t.get("key").is_none())),
        "the daemon must tolerate every taint"
    );
    let c = &pod["containers"][0];
    let env = c["env"].as_array().expect("env");
    assert!(
        env.iter().any(|e| e["name"] == "NODE_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"),
        "NODE_NAME from the downward API"
    );
    let args = strings(&c["args"]);
    // Health and metrics on a host port of their own: kruise-daemon has 10221 and 10222.
    let port = args
        .iter()
        .find_map(|a| a.strip_prefix("--addr=0.0.0.0:"))
        .and_then(|p| p.parse::<u16>().ok())
        .expect("--addr=0.0.0.0:PORT");
    assert!(
        port != 10221 && port != 10222,
        "port {port} clashes with kruise-daemon"
    );
    assert_eq!(c["ports"][0]["containerPort"], port);
    assert_eq!(c["ports"][0]["hostPort"], port);
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz", "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], port, "{probe}");
    }
    for r in ["cpu", "memory"] {
        assert!(
            c["resources"]["requests"][r]
                .as_str()
                .is_some_and(|q| !q.starts_with('0')),
            "a {r} request keeps the daemon from being evicted first"
        );
    }
    // Least privilege: no privileged mode, no capability, non-root.
    let sc = &c["securityContext"];
    assert_ne!(sc["privileged"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(
        strings(&sc["capabilities"]["drop"]),
        vec!["ALL".to_string()]
    );
    assert!(sc["capabilities"]["add"].is_null());
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_ne!(pod["securityContext"]["runAsUser"], 0);
    // The CRI socket: --cri-endpoint under a mount of its own, read-only, that does not
    // cover /run or /var/run (where the service-account token is mounted).
    let endpoint = args
        .iter()
        .find_map(|a| a.strip_prefix("--cri-endpoint="))
        .expect("--cri-endpoint");
    let path = endpoint.trim_start_matches("unix://");
    let mounts = c["volumeMounts"].as_array().expect("volumeMounts");
    let covers = |at: &str, p: &str| {
        let at = at.trim_end_matches('/');
        p == at || p.starts_with(&format!("{at}/"))
    };
    for m in mounts {
        let at = m["mountPath"].as_str().unwrap_or_default();
        assert_eq!(m["readOnly"], true, "{at} must be read-only");
        // /var/run is a symlink to /run in distroless-style images.
        for token in [
            "/var/run/secrets/kubernetes.io/serviceaccount",
            "/run/secrets/kubernetes.io/serviceaccount",
        ] {
            assert!(!covers(at, token), "{at} covers the service-account token");
        }
    }
    let socket_mount = mounts
        .iter()
        .find(|m| {
            m["mountPath"]
                .as_str()
                .is_some_and(|at| path.starts_with(&format!("{at}/")))
        })
        .unwrap_or_else(|| panic!("--cri-endpoint={endpoint} is not under a mount"));
    let volume = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == socket_mount["name"])
        .expect("the socket's volume");
    assert_eq!(volume["hostPath"]["path"], "/run/containerd");
    assert_eq!(volume["hostPath"]["type"], "Directory");
}

/// kubectl on the bed; the error as text.
fn kubectl(args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    inplace_testkit::bed::kubectl(args, stdin).map_err(|e| e.to_string())
}

/// `kubectl apply --dry-run=server` of what `kubectl apply -k deploy/k8s-1.20` applies (the
/// bed is a 1.20 server), after checking that it is deploy/'s output but for the
/// PodDisruptionBudget's API version. The namespaced objects go to a scratch namespace
/// (the text `inplace-system` is replaced), so the shared bed is left as it was; the scratch
/// namespace is deleted at the end.
#[test]
#[ignore = "needs the test bed"]
fn manifests_pass_a_server_side_dry_run() {
    let render = |dir: &str| {
        kubectl(
            &["kustomize", &deploy_dir().join(dir).to_string_lossy()],
            None,
        )
        .unwrap()
    };
    let current = render(".");
    let old = render("k8s-1.20");
    assert_eq!(
        old,
        current.replace("apiVersion: policy/v1\n", "apiVersion: policy/v1beta1\n"),
        "deploy/k8s-1.20 differs from deploy/ in more than the PodDisruptionBudget's version"
    );
    assert!(old.contains("apiVersion: policy/v1beta1\nkind: PodDisruptionBudget"));
    let ns = format!("e2e-deploy-{:06x}", rand::random::<u32>() & 0xff_ffff);
    kubectl(&["create", "namespace", &ns], None).unwrap();
    // kubectl 1.20's client-side schema does not know `x-kubernetes-validations`: the
    // server (which does) validates instead.
    let result = kubectl(
        &["apply", "--dry-run=server", "--validate=false", "-f", "-"],
        Some(&old.replace("inplace-system", &ns)),
    );
    let _ = kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
    let all = result.unwrap();
    eprintln!("{all}");
    for expected in [
        "customresourcedefinition.apiextensions.k8s.io/clonesets.apps.kruise.io",
        "deployment.apps/inplace-controller",
        "daemonset.apps/inplace-daemon",
        "poddisruptionbudget.policy/inplace-controller",
        "service/inplace-controller-metrics",
        "clusterrole.rbac.authorization.k8s.io/inplace-daemon",
        "serviceaccount/inplace-daemon",
    ] {
        assert!(all.contains(expected), "no {expected} in:\n{all}");
    }
    assert!(all.contains("(server dry run)"), "{all}");
}
