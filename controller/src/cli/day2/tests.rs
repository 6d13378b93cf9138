#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::plan::revision::revision_data;
use inplace_proto::PodTemplate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

fn template(containers: &[(&str, &str)]) -> Value {
    let cs: Vec<Value> = containers
        .iter()
        .map(|(n, i)| json!({"name": n, "image": i}))
        .collect();
    json!({"metadata": {"labels": {"app": "demo"}}, "spec": {"containers": cs}})
}

fn cloneset(tpl: &Value) -> CloneSet {
    let mut cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "demo", "uid": "u1", "resourceVersion": "42"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "demo"}},
                 "template": tpl},
    }))
    .unwrap();
    cs.metadata.namespace = Some("default".into());
    cs
}

fn revision(
    name: &str,
    number: i64,
    tpl: &Value,
    owner: &str,
    cause: Option<&str>,
) -> ControllerRevision {
    let t = PodTemplate(inplace_proto::RawObject(tpl.as_object().unwrap().clone()));
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(vec![OwnerReference {
                uid: owner.into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            annotations: cause.map(|c| {
                [(CHANGE_CAUSE_ANNOTATION.to_string(), c.to_string())]
                    .into_iter()
                    .collect()
            }),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(revision_data(&t))),
        revision: number,
    }
}

#[test]
fn targets() {
    let table: &[(&str, Result<&str, ()>)] = &[
        ("demo", Ok("demo")),
        ("cloneset/demo", Ok("demo")),
        ("clonesets/demo", Ok("demo")),
        ("CloneSet/demo", Ok("demo")),
        ("clone/demo", Ok("demo")),
        ("cloneset.apps.kruise.io/demo", Ok("demo")),
        ("clonesets.v1alpha1.apps.kruise.io/demo", Ok("demo")),
        ("deployment/demo", Err(())),
        ("cloneset/a/b", Err(())),
        ("cloneset/", Err(())),
        ("", Err(())),
    ];
    for (arg, want) in table {
        assert_eq!(
            parse_target(arg).map_err(|_| ()),
            want.map(str::to_string),
            "{arg}"
        );
    }
}

#[test]
fn changes_between_templates() {
    let a = template(&[("app", "img:v1"), ("side", "s:1")]);
    let table: &[(Value, &[&str])] = &[
        (template(&[("app", "img:v1"), ("side", "s:1")]), &[]),
        (
            template(&[("app", "img:v2"), ("side", "s:1")]),
            &["app: img:v1 -> img:v2"],
        ),
        (template(&[("app", "img:v1")]), &["side removed"]),
        (
            template(&[("app", "img:v1"), ("side", "s:1"), ("log", "l:1")]),
            &["log added (l:1)"],
        ),
        (
            {
                let mut t = a.clone();
                t["metadata"]["labels"]["x"] = json!("y");
                t
            },
            &["other fields of the template"],
        ),
    ];
    for (next, want) in table {
        assert_eq!(changes(&a, next), *want, "{next}");
    }
}

#[test]
fn init_containers_are_named_with_a_prefix() {
    let mut t = template(&[("app", "a:1")]);
    t["spec"]["initContainers"] = json!([{"name": "setup", "image": "s:1"}]);
    assert_eq!(
        images(&t),
        vec![
            ("init:setup".to_string(), "s:1".to_string()),
            ("app".to_string(), "a:1".to_string())
        ]
    );
}

#[test]
fn history_orders_by_revision_and_skips_other_owners() {
    let v1 = template(&[("app", "img:v1")]);
    let v2 = template(&[("app", "img:v2")]);
    let cs = cloneset(&v2);
    let revs = vec![
        revision("demo-b", 2, &v2, "u1", Some("bump")),
        revision("other-x", 1, &v1, "u2", None),
        revision("demo-a", 1, &v1, "u1", None),
    ];
    let h = history(&cs, &revs);
    assert_eq!(h.len(), 2);
    assert_eq!((h[0].revision, h[0].name.as_str()), (1, "demo-a"));
    assert!(h[0].changes.is_empty());
    assert!(!h[0].current);
    assert_eq!(h[1].change_cause.as_deref(), Some("bump"));
    assert_eq!(h[1].changes, ["app: img:v1 -> img:v2"]);
    assert!(h[1].current);
    assert_eq!(
        history_table("demo", &h),
        "cloneset.apps.kruise.io/demo
REVISION  NAME    CHANGE-CAUSE  IMAGES      CHANGES
1         demo-a  <none>        app=img:v1  -
2*        demo-b  bump          app=img:v2  app: img:v1 -> img:v2
(* = the current template)
"
    );
    let json = serde_json::to_value(&h).unwrap();
    assert_eq!(json[0].get("changeCause"), None);
    assert_eq!(json[1]["changeCause"], "bump");
}

#[test]
fn undo_decisions() {
    let v1 = template(&[("app", "img:v1")]);
    let v2 = template(&[("app", "img:v2")]);
    let v3 = template(&[("app", "img:v3")]);
    let revs = vec![
        revision("demo-a", 1, &v1, "u1", None),
        revision("demo-b", 2, &v2, "u1", None),
        revision("demo-c", 3, &v3, "u1", None),
    ];
    let cs = cloneset(&v3);
    // Default: the newest revision that is not the current template.
    let undo = undo_patch(&cs, &revs, None).unwrap();
    assert_eq!(undo.revision, 2);
    assert_eq!(
        undo.patch,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "replace", "path": "/spec/template", "value": v2},
        ])
    );
    assert_eq!(undo_patch(&cs, &revs, Some(1)).unwrap().revision, 1);
    assert!(matches!(
        undo_patch(&cs, &revs, Some(3)),
        Err(Day2Error::AlreadyCurrent { revision: 3, .. })
    ));
    let e = undo_patch(&cs, &revs, Some(9)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cloneset demo has no revision 9 (revisions: 1, 2, 3)"
    );
    // After an undo to 1 the controller bumps revision 1 to 4: the default is then 3.
    let mut bumped = revs.clone();
    bumped[0].revision = 4;
    assert_eq!(
        undo_patch(&cloneset(&v1), &bumped, None).unwrap().revision,
        3
    );
    // Only one revision: nothing to go back to.
    assert_eq!(
        undo_patch(&cloneset(&v1), &revs[..1], None),
        Err(Day2Error::NoPreviousRevision("demo".into()))
    );
}

#[test]
fn undo_drops_nulls_of_typed_encodings() {
    let mut v1 = template(&[("app", "img:v1")]);
    v1["metadata"]["creationTimestamp"] = Value::Null;
    let revs = vec![revision("demo-a", 1, &v1, "u1", None)];
    let undo = undo_patch(&cloneset(&template(&[("app", "x")])), &revs, None).unwrap();
    assert_eq!(undo.patch[1]["value"], template(&[("app", "img:v1")]));
}

#[test]
fn image_arguments() {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let ok = |a: &[&str]| parse_image_args(&args(a)).unwrap();
    assert_eq!(
        ok(&["app=reg/app:v2", " side = s:2"]),
        vec![
            ("app".to_string(), "reg/app:v2".to_string()),
            ("side".to_string(), "s:2".to_string())
        ]
    );
    // An image may itself contain '=' (a digest query is not valid, but the split is
    // on the first '=').
    assert_eq!(ok(&["app=a=b"])[0].1, "a=b");
    assert_eq!(ok(&["*=x:1"])[0].0, "*");
    for bad in [
        &["app"][..],
        &["=img"],
        &["app="],
        &["app=a b"],
        &["app=a", "app=b"],
        &["*=a", "app=b"],
        &[],
    ] {
        assert!(parse_image_args(&args(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn set_image_patches() {
    let mut tpl = template(&[("app", "a:1"), ("side", "s:1")]);
    tpl["spec"]["initContainers"] = json!([{"name": "setup", "image": "i:1"}]);
    let cs = cloneset(&tpl);
    let pair = |c: &str, i: &str| (c.to_string(), i.to_string());
    assert_eq!(
        set_image_patch(&cs, &[pair("side", "s:2"), pair("setup", "i:2")]).unwrap(),
        Some(json!([
            {"op": "test", "path": "/spec/template/spec/initContainers/0/name", "value": "setup"},
            {"op": "replace", "path": "/spec/template/spec/initContainers/0/image", "value": "i:2"},
            {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "side"},
            {"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": "s:2"},
        ]))
    );
    assert_eq!(set_image_patch(&cs, &[pair("app", "a:1")]).unwrap(), None);
    let all = set_image_patch(&cs, &[pair("*", "a:1")]).unwrap().unwrap();
    assert_eq!(all.as_array().unwrap().len(), 4, "{all}");
    let e = set_image_patch(
        &cs,
        &[pair("app", "a:2"), pair("nope", "x"), pair("zz", "y")],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cloneset demo has no container named nope, zz (containers: setup, app, side)"
    );
}

#[test]
fn pods_argument() {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        parse_pods(&args(&["a, b,", "a,c"])).unwrap(),
        ["a", "b", "c"]
    );
    assert_eq!(parse_pods(&args(&[" , "])), Err(Day2Error::NoPods));
}

#[test]
fn scale_down_merges_pods_to_delete() {
    let mut cs = cloneset(&template(&[("app", "a:1")]));
    let owned: BTreeSet<String> = ["p1", "p2", "p3"].iter().map(|s| s.to_string()).collect();
    let pods = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let s = scale_down_patch(&cs, &pods(&["p1", "p2"]), &owned).unwrap();
    assert_eq!(s.replicas, 1);
    assert_eq!(
        s.patch,
        json!({"metadata": {"resourceVersion": "42"},
                   "spec": {"replicas": 1, "scaleStrategy": {"podsToDelete": ["p1", "p2"]}}})
    );

    // Already listed: kept, not counted again.
    cs.spec.scale_strategy = Some(inplace_proto::CloneSetScaleStrategy {
        pods_to_delete: vec!["p1".into()],
        ..Default::default()
    });
    let s = scale_down_patch(&cs, &pods(&["p1", "p3"]), &owned).unwrap();
    assert_eq!(
        (s.added.clone(), s.already.clone(), s.replicas),
        (pods(&["p3"]), pods(&["p1"]), 2)
    );
    assert_eq!(
        s.patch["spec"]["scaleStrategy"]["podsToDelete"],
        json!(["p1", "p3"])
    );

    let e = scale_down_patch(&cs, &pods(&["p2", "x", "y"]), &owned).unwrap_err();
    assert_eq!(e.to_string(), "pod x, y not owned by cloneset demo");

    cs.spec.replicas = Some(1);
    cs.spec.scale_strategy = None;
    assert!(matches!(
        scale_down_patch(&cs, &pods(&["p1", "p2"]), &owned),
        Err(Day2Error::TooFewReplicas { .. })
    ));
    assert_eq!(scale_down_patch(&cs, &[], &owned), Err(Day2Error::NoPods));
}

/// `rollout restart` writes only the template annotation; the planner then restarts
/// every container in place (never a recreate), and a second restart does it again.
#[test]
fn restart_patch_makes_an_in_place_restart_of_every_container() {
    let before = template(&[("main", "nginx:1"), ("side", "busybox:1")]);
    let cs = cloneset(&before);
    let mut patched = serde_json::to_value(&cs).unwrap();
    json_patch::merge(&mut patched, &restart_patch("2026-01-02T03:04:05Z"));
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"],
        "2026-01-02T03:04:05Z"
    );
    assert_eq!(
        patched["spec"]["template"]["metadata"]["labels"],
        json!({"app": "demo"})
    );
    let after = patched["spec"]["template"].as_object().unwrap().clone();
    let decide = |old: &Value, new: &Map<String, Value>| {
        crate::plan::inplace::decide(
            inplace_proto::CloneSetUpdateStrategyType::InPlaceIfPossible,
            old.as_object(),
            new,
            None,
            None,
            &crate::plan::model::PlanOptions::default(),
        )
    };
    let crate::plan::inplace::InPlaceDecision::InPlace(change) = decide(&before, &after) else {
        panic!("a restart must go in place");
    };
    let restarts: Vec<&str> = change.restarts.iter().map(String::as_str).collect();
    assert_eq!(restarts, ["main", "side"]);
    assert!(change.images.is_empty());
    let mut again = Value::Object(after.clone());
    json_patch::merge(
        &mut again,
        &restart_patch("2026-01-02T03:05:00Z")["spec"]["template"],
    );
    let crate::plan::inplace::InPlaceDecision::InPlace(change) =
        decide(&Value::Object(after), again.as_object().unwrap())
    else {
        panic!("a second restart must go in place");
    };
    assert_eq!(change.restarts.len(), 2);
}

#[test]
fn restart_notes_name_what_keeps_pods_from_restarting_in_place() {
    let mut cs = cloneset(&template(&[("main", "nginx:1")]));
    // The default type is ReCreate, as in the reference.
    assert!(restart_notes(&cs)[0].contains("ReCreate"));
    cs.spec.update_strategy =
        serde_json::from_value(json!({"type": "InPlaceIfPossible", "partition": 0})).unwrap();
    assert!(restart_notes(&cs).is_empty());
    cs.spec.update_strategy = serde_json::from_value(json!({
            "type": "ReCreate", "paused": true, "partition": 2}))
    .unwrap();
    let notes = restart_notes(&cs);
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(notes[0].contains("ReCreate"));
    assert!(notes[1].contains("paused"));
    assert!(notes[2].starts_with("partition 2"));
    cs.spec.update_strategy = serde_json::from_value(json!({"type": "OnDelete"})).unwrap();
    assert!(restart_notes(&cs)[0].contains("OnDelete"));
}
