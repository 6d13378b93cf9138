//! End-to-end: `deploy/crds` take over the CRDs of an OpenKruise v1.9.0 install, every kind
//! at the versions v1.9.0 serves and stores, and every object reads back unchanged
//! (docs/migrating-from-openkruise.md, step 3).
//!
//! OpenKruise v1.9.0 stores ImagePullJob, NodeImage and ImageListPullJob as `v1beta1`
//! (and still serves `v1alpha1`), CloneSet and ContainerRecreateRequest as `v1alpha1`. A
//! CRD that lacks a stored version cannot replace one that has it (the API server keeps
//! every entry of `status.storedVersions` in `spec.versions`); the test shows that refusal
//! first, then the takeover.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored kruise_versions::
//! ```

use crate::support as e2e_support;

use std::collections::BTreeMap;
use std::time::Duration;

use e2e_support::*;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

/// OpenKruise v1.9.0's CRDs of the five kinds (versions and storage as there, open
/// schemas): tests/fixtures/openkruise-v1.9.0-crds.yaml.
const KRUISE_CRDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/openkruise-v1.9.0-crds.yaml"
);
/// What the guide applies (the CRDs of `kubectl apply -k deploy/`).
const DEPLOY_CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/crds");

/// The kinds v1.9.0 stores as `v1beta1`: their CRDs are recreated from the fixture, so
/// that `status.storedVersions` is `["v1beta1"]` as on a cluster installed at v1.9.0.
const BETA_STORED: &[&str] = &["imagepulljobs", "nodeimages", "imagelistpulljobs"];

/// One object of the test: its resource, the version it is created through, and the
/// versions it is read back through.
struct Case {
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    create_as: &'static str,
    read_as: &'static [&'static str],
    object: Value,
    status: Value,
}

fn api(client: &kube::Client, case: &Case, version: &str, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apps.kruise.io", version, case.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, case.plural);
    if case.namespaced {
        Api::namespaced_with(client.clone(), ns, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    }
}

fn crd_json(name: &str) -> TestResult<Value> {
    kubectl_json(&["get", "crd", name])
}

fn stored_versions(plural: &str) -> TestResult<Value> {
    Ok(crd_json(&format!("{plural}.apps.kruise.io"))?["status"]["storedVersions"].clone())
}

/// `(name, served, storage)` of each entry of a CRD's `spec.versions`.
fn versions_of(crd: &Value) -> Vec<(String, bool, bool)> {
    crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or_default().to_owned(),
                v["served"].as_bool().unwrap_or_default(),
                v["storage"].as_bool().unwrap_or_default(),
            )
        })
        .collect()
}

/// The objects of the YAML file (or directory) `path` as kubectl reads them, as JSON (no
/// YAML crate here). kubectl prints one JSON document per object, one after the other.
/// `--validate=false`: kubectl 1.20 does not know `x-kubernetes-validations`.
fn documents(path: &str) -> TestResult<Vec<Value>> {
    let out = kubectl(
        &[
            "create",
            "--dry-run=client",
            "--validate=false",
            "-o",
            "json",
            "-f",
            path,
        ],
        None,
    )?;
    let mut docs = Vec::new();
    for doc in serde_json::Deserializer::from_str(&out).into_iter::<Value>() {
        let doc = doc?;
        match doc.get("items").and_then(Value::as_array) {
            Some(items) if doc["kind"] == "List" => docs.extend(items.iter().cloned()),
            _ => docs.push(doc),
        }
    }
    Ok(docs)
}

/// The five objects, each as OpenKruise v1.9.0 stores it: the fields its webhooks default
/// are written (the CRDs here default them too, and an absent one would be filled in on
/// read), and every field of its Go types that the object can carry is set, so that a
/// field our schema lacked would be pruned on read and seen.
fn cases(ns: &str) -> Vec<Case> {
    let t = "2026-01-02T03:04:05Z";
    let t2 = "2026-01-02T03:05:06Z";
    let now =
        k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .map(|t| t.to_string())
            .unwrap_or_else(|_| t2.to_owned());
    let template = json!({
        "pullSecrets": ["regcred"],
        "selector": {"names": ["node-a", "node-b"]},
        "parallelism": 2,
        "pullPolicy": {"timeoutSeconds": 300, "backoffLimit": 2},
        "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 1200,
                             "ttlSecondsAfterFinished": 600},
        "sandboxConfig": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
        "imagePullPolicy": "Always"
    });
    let mut ipj_spec = template.clone();
    ipj_spec["image"] = json!("registry.example/app:v2");
    let mut ilpj_spec = template;
    ilpj_spec["images"] = json!(["registry.example/app:v2", "registry.example/side:v1"]);
    vec![
        Case {
            plural: "clonesets",
            kind: "CloneSet",
            namespaced: true,
            create_as: "v1alpha1",
            read_as: &["v1alpha1"],
            object: json!({
                "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
                "spec": {
                    "replicas": 0,
                    "revisionHistoryLimit": 10,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "main", "image": "registry.example/app:v1"}]}
                    },
                    "scaleStrategy": {"podsToDelete": ["web-abcde"], "maxUnavailable": 1},
                    "updateStrategy": {"type": "InPlaceIfPossible", "partition": 0,
                                       "maxUnavailable": "20%", "maxSurge": 0,
                                       "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10}},
                    "minReadySeconds": 5,
                    "lifecycle": {"preDelete": {"labelsHandler": {"hook": "true"}}}
                }
            }),
            status: json!({
                "observedGeneration": 1, "replicas": 0, "readyReplicas": 0,
                "availableReplicas": 0, "updatedReplicas": 0, "updatedReadyReplicas": 0,
                "updatedAvailableReplicas": 0, "expectedUpdatedReplicas": 0,
                "updateRevision": "web-6d4c5b7f8", "currentRevision": "web-6d4c5b7f8",
                "collisionCount": 0, "labelSelector": "app=web"
            }),
        },
        Case {
            plural: "containerrecreaterequests",
            kind: "ContainerRecreateRequest",
            namespaced: true,
            create_as: "v1alpha1",
            read_as: &["v1alpha1"],
            object: json!({
                "metadata": {"name": "restart", "namespace": ns,
                             "labels": {"crr.apps.kruise.io/pod-name": "web-abcde"}},
                "spec": {
                    "podName": "web-abcde",
                    "containers": [{"name": "main"}],
                    "strategy": {"failurePolicy": "Fail", "orderedRecreate": false,
                                 "unreadyGracePeriodSeconds": 3, "minStartedSeconds": 10},
                    "activeDeadlineSeconds": 300,
                    "ttlSecondsAfterFinished": 1800
                }
            }),
            status: json!({
                "phase": "Completed", "completionTime": t, "message": "done",
                "containerRecreateStates": [{"name": "main", "phase": "Succeeded",
                                             "isKilled": true}]
            }),
        },
        Case {
            plural: "imagepulljobs",
            kind: "ImagePullJob",
            namespaced: true,
            create_as: "v1beta1",
            read_as: &["v1beta1", "v1alpha1"],
            object: json!({"metadata": {"name": "pull", "namespace": ns}, "spec": ipj_spec}),
            status: json!({
                "startTime": t, "completionTime": t2, "desired": 2, "active": 0,
                "succeeded": 1, "failed": 1, "message": "node-b: not found",
                "failedNodes": ["node-b"]
            }),
        },
        Case {
            plural: "nodeimages",
            kind: "NodeImage",
            namespaced: false,
            create_as: "v1beta1",
            read_as: &["v1beta1", "v1alpha1"],
            object: json!({
                "metadata": {"name": format!("{ns}-node")},
                "spec": {"images": {"registry.example/app": {
                    "pullSecrets": [{"namespace": "kruise-daemon-config", "name": "regcred",
                                     "mode": "batch"}],
                    "tags": [{
                        "tag": "v2",
                        "createdAt": t,
                        "pullPolicy": {"timeoutSeconds": 300, "backoffLimit": 2,
                                       "ttlSecondsAfterFinished": 600,
                                       "activeDeadlineSeconds": 1200},
                        "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1",
                                             "kind": "ImagePullJob", "name": "pull",
                                             "namespace": ns,
                                             "uid": "00000000-0000-0000-0000-000000000001"}],
                        "version": 1,
                        "imagePullPolicy": "Always"
                    }],
                    "sandboxConfig": {"labels": {"team": "a"}}
                }}}
            }),
            status: json!({
                "desired": 1, "succeeded": 1, "failed": 0, "pulling": 0, "waiting": 0,
                "imageStatuses": {"registry.example/app": {"tags": [{
                    "tag": "v2", "phase": "Succeeded", "progress": 100, "startTime": t,
                    "completionTime": t2, "version": 1,
                    "imageID": "registry.example/app@sha256:0123", "message": "pulled"
                }]}},
                "firstSyncStatus": {"syncAt": t, "status": "Succeeded", "message": "synced"}
            }),
        },
        Case {
            plural: "imagelistpulljobs",
            kind: "ImageListPullJob",
            namespaced: true,
            create_as: "v1beta1",
            read_as: &["v1beta1", "v1alpha1"],
            object: json!({"metadata": {"name": "pull-list", "namespace": ns},
                           "spec": ilpj_spec}),
            // complete just now: an installed controller leaves a complete list alone
            // until its TTL (600 s), where an unfinished one would get its jobs made and
            // its status rewritten while the test reads it back
            status: json!({
                "startTime": t, "completionTime": now, "desired": 2, "active": 1,
                "completed": 1, "succeeded": 1,
                "failedImageStatuses": [{"imagePullJob": "pull-list-x", "name":
                                         "registry.example/side:v1", "message": "not found"}]
            }),
        },
    ]
}

/// Every object, read through each of its versions: `(plural, version) -> object`.
async fn read_all(
    client: &kube::Client,
    cases: &[Case],
    ns: &str,
) -> TestResult<BTreeMap<(String, String), Value>> {
    let mut out = BTreeMap::new();
    for case in cases {
        let name = case.object["metadata"]["name"].as_str().unwrap_or_default();
        for version in case.read_as {
            let obj = api(client, case, version, ns).get(name).await?;
            out.insert(
                (case.plural.to_owned(), (*version).to_owned()),
                serde_json::to_value(obj)?,
            );
        }
    }
    Ok(out)
}

/// The object read as NodeImage `v1alpha1` under OpenKruise v1.9.0's real CRD: its
/// `v1alpha1` schema has no `pullSecrets[].mode`, so the API server prunes it (the
/// fixture's open schema keeps it).
fn without_pull_secret_modes(mut obj: Value) -> Value {
    if let Some(images) = obj
        .pointer_mut("/spec/images")
        .and_then(Value::as_object_mut)
    {
        for image in images.values_mut() {
            if let Some(secrets) = image.get_mut("pullSecrets").and_then(Value::as_array_mut) {
                for secret in secrets.iter_mut().filter_map(Value::as_object_mut) {
                    secret.remove("mode");
                }
            }
        }
    }
    obj
}

/// Host process: needs no controller or daemon at all, and replaces CRDs that an installed
/// controller and daemon watch. Its suite runs alone (no other test of this module).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_deploy_crds_take_over_openkruise_v1_9_versions() -> TestResult {
    let ns = Namespace::create("kv19")?;
    let client = client().await?;
    let result = take_over(&client, &ns.name).await;
    // The bed keeps our CRDs whatever happened (the other suites need them).
    let restore = kubectl(&["apply", "--validate=false", "-f", DEPLOY_CRDS], None);
    let _ = kubectl(
        &[
            "delete",
            "--ignore-not-found",
            "nodeimage",
            &format!("{}-node", ns.name),
        ],
        None,
    );
    result?;
    restore?;
    Ok(())
}

async fn take_over(client: &kube::Client, ns: &str) -> TestResult {
    // 1. A cluster at OpenKruise v1.9.0: the kinds it stores as v1beta1 get their CRDs
    // afresh (a CRD's storedVersions never shrink by themselves); CloneSet and CRR, stored
    // as v1alpha1 by both, are replaced in place as a v1.9.0 install would have them.
    for plural in BETA_STORED {
        kubectl(
            &[
                "delete",
                "--ignore-not-found",
                "--wait=true",
                "crd",
                &format!("{plural}.apps.kruise.io"),
            ],
            None,
        )?;
    }
    let fixture = documents(KRUISE_CRDS)?;
    for crd in &fixture {
        kubectl(&["apply", "-f", "-"], Some(&crd.to_string()))?;
    }
    for crd in &fixture {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        wait_for(
            &format!("{name} established"),
            Duration::from_secs(60),
            || {
                let live = crd_json(&name)?;
                Ok(live["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
                    && versions_of(&live) == versions_of(crd))
            },
        )?;
    }

    // 2. One object of every kind, created through the version v1.9.0's clients use, with
    // its status written through the status subresource (as its controllers do).
    let cases = cases(ns);
    for case in &cases {
        let api = api(client, case, case.create_as, ns);
        let mut obj: DynamicObject = serde_json::from_value(case.object.clone())?;
        obj.types = Some(kube::core::TypeMeta {
            api_version: format!("apps.kruise.io/{}", case.create_as),
            kind: case.kind.to_owned(),
        });
        let created = api.create(&PostParams::default(), &obj).await?;
        let name = created.metadata.name.clone().unwrap_or_default();
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": case.status})),
        )
        .await?;
    }
    for plural in BETA_STORED {
        assert_eq!(
            stored_versions(plural)?,
            json!(["v1beta1"]),
            "{plural}: stored as on a v1.9.0 cluster"
        );
    }
    for plural in ["clonesets", "containerrecreaterequests"] {
        assert_eq!(stored_versions(plural)?, json!(["v1alpha1"]), "{plural}");
    }
    let before = read_all(client, &cases, ns).await?;

    // 3. The refusal the guide warns of: a CRD without v1beta1 (inplace's before it
    // served v1beta1) cannot replace one whose storedVersions hold it.
    let mut alpha_only = documents(&format!("{DEPLOY_CRDS}/apps.kruise.io_imagepulljobs.yaml"))?
        .into_iter()
        .next()
        .ok_or("no CRD in apps.kruise.io_imagepulljobs.yaml")?;
    if let Some(versions) = alpha_only["spec"]["versions"].as_array_mut() {
        versions.retain(|v| v["name"] == "v1alpha1");
        for v in versions.iter_mut() {
            v["storage"] = json!(true);
        }
    }
    let refused = kubectl(
        &["apply", "--dry-run=server", "--validate=false", "-f", "-"],
        Some(&alpha_only.to_string()),
    );
    match refused {
        Err(e) => assert!(
            e.to_string().contains("must appear in spec.versions"),
            "refused for another reason: {e}"
        ),
        Ok(out) => panic!("a v1alpha1-only CRD replaced a v1beta1-stored one: {out}"),
    }

    // 4. The migration guide's step 3 for the CRDs: apply deploy/crds over them.
    kubectl(&["apply", "--validate=false", "-f", DEPLOY_CRDS], None)?;
    for crd in documents(DEPLOY_CRDS)? {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let live = crd_json(&name)?;
        assert_eq!(
            versions_of(&live),
            versions_of(&crd),
            "{name}: spec.versions are deploy/crds'"
        );
        let fixture_crd = fixture
            .iter()
            .find(|f| f["metadata"]["name"] == name.as_str())
            .ok_or_else(|| format!("{name} is not in the fixture"))?;
        assert_eq!(
            versions_of(&live),
            versions_of(fixture_crd),
            "{name}: the versions and storage OpenKruise v1.9.0 declares"
        );
        let strategy = live["spec"]["conversion"]["strategy"]
            .as_str()
            .unwrap_or("None");
        assert_eq!(strategy, "None", "{name}: no conversion webhook");
    }
    for plural in BETA_STORED {
        assert_eq!(stored_versions(plural)?, json!(["v1beta1"]), "{plural}");
    }

    // 5. Every object reads back unchanged through every version. Our schema is in effect
    // once NodeImage v1alpha1 leaves out pullSecrets[].mode (the one field v1.9.0's
    // v1alpha1 lacks); the API server switches a CRD's handler asynchronously.
    let mut after = BTreeMap::new();
    wait_for(
        "deploy/crds' schemas in effect",
        Duration::from_secs(60),
        || {
            after = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(read_all(client, &cases, ns))
            })?;
            let key = ("nodeimages".to_owned(), "v1alpha1".to_owned());
            Ok(after
                .get(&key)
                .and_then(|o| o.pointer("/spec/images/registry.example~1app/pullSecrets/0"))
                .is_some_and(|s| s.get("mode").is_none()))
        },
    )?;
    for (key, was) in &before {
        let now = after
            .get(key)
            .ok_or_else(|| format!("{key:?} not read back"))?;
        let want = if key.0 == "nodeimages" && key.1 == "v1alpha1" {
            without_pull_secret_modes(was.clone())
        } else {
            was.clone()
        };
        assert_eq!(now, &want, "{key:?} changed by the takeover");
    }
    let modes = after
        .get(&("nodeimages".to_owned(), "v1beta1".to_owned()))
        .and_then(|o| o.pointer("/spec/images/registry.example~1app/pullSecrets/0/mode"))
        .cloned();
    assert_eq!(
        modes,
        Some(json!("batch")),
        "v1beta1 keeps pullSecrets[].mode"
    );
    eprintln!(
        "takeover: {} objects read back unchanged through {} kind/version pairs",
        cases.len(),
        after.len()
    );
    Ok(())
}
