use super::*;

/// A test error: its text, or the aggregate it was made from.
#[derive(Debug, PartialEq)]
enum E {
    One(&'static str),
    Many(usize, usize, Box<E>),
}

impl From<Aggregate<E>> for E {
    fn from(a: Aggregate<E>) -> Self {
        E::Many(a.failed, a.total, Box::new(a.first))
    }
}

fn kind(s: &&str) -> FailureKind {
    if s.starts_with("create") {
        FailureKind::Scale
    } else {
        FailureKind::Update
    }
}

#[test]
fn a_phase_is_tallied_as_attempted_skipped_and_failed() {
    // (phase length, results) → (attempted, skipped, failure kinds, failed)
    type Row = (usize, Vec<(&'static str, Result<(), E>)>);
    type Want = (usize, usize, Vec<FailureKind>, bool);
    let table: Vec<(Row, Want)> = vec![
        ((0, vec![]), (0, 0, vec![], false)),
        (
            (2, vec![("create a", Ok(())), ("create b", Ok(()))]),
            (2, 0, vec![], false),
        ),
        (
            (
                4,
                vec![("create a", Ok(())), ("create b", Err(E::One("x")))],
            ),
            (2, 2, vec![FailureKind::Scale], true),
        ),
        (
            (
                2,
                vec![
                    ("update a", Err(E::One("x"))),
                    ("create b", Err(E::One("y"))),
                ],
            ),
            (2, 0, vec![FailureKind::Update, FailureKind::Scale], true),
        ),
    ];
    for ((len, results), (attempted, skipped, kinds, failed)) in table {
        let mut outcome = Outcome::default();
        assert_eq!(outcome.tally(len, results, kind), failed);
        assert_eq!((outcome.attempted, outcome.skipped), (attempted, skipped));
        let got: Vec<_> = outcome.failures.iter().map(|f| f.kind).collect();
        assert_eq!(got, kinds);
    }
}

#[test]
fn one_failure_is_the_error_several_are_aggregated_with_the_first() {
    let none: Outcome<E> = Outcome {
        attempted: 3,
        ..Outcome::default()
    };
    assert_eq!(none.into_error(), None);

    let mut one = Outcome {
        attempted: 3,
        ..Outcome::default()
    };
    one.fail(FailureKind::Update, E::One("a"));
    assert_eq!(one.into_error(), Some(E::One("a")));

    let mut two = Outcome {
        attempted: 5,
        ..Outcome::default()
    };
    two.fail(FailureKind::Scale, E::One("a"));
    two.fail(FailureKind::Update, E::One("b"));
    assert_eq!(two.into_error(), Some(E::Many(2, 5, Box::new(E::One("a")))));
}

#[test]
fn a_later_write_of_a_pod_is_pinned_to_what_our_earlier_write_left() {
    let left = LeftVersions::default();
    // nothing written yet: the cached pod's version
    assert_eq!(left.pin_for("demo-a", Some("7".into())), Some("7".into()));
    // a write of another pod, and an answer without a version, change nothing
    left.record("demo-b", "20");
    left.record("demo-a", "");
    assert_eq!(left.pin_for("demo-a", Some("7".into())), Some("7".into()));
    // our patch of demo-a left 12, then 15: the next write is pinned to the last
    for rv in ["12", "15"] {
        left.record("demo-a", rv);
    }
    assert_eq!(left.pin_for("demo-a", Some("7".into())), Some("15".into()));
    assert_eq!(left.pin_for("demo-b", None), Some("20".into()));
}

#[test]
fn a_failed_revision_write_skips_every_step() {
    let outcome = Outcome::revisions_failed(4, E::One("create revision"));
    assert_eq!((outcome.attempted, outcome.skipped), (1, 4));
    let kinds: Vec<_> = outcome.failures.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [FailureKind::Update]);
    assert_eq!(outcome.into_error(), Some(E::One("create revision")));
}

#[test]
fn failures_set_aside_fail_neither_the_phase_nor_the_reconcile() {
    // A pre-download phase of three steps whose second failed (its chain stopped there).
    let mut outcome = Outcome::default();
    let results = vec![("job a", Ok(())), ("job b", Err(E::One("quota")))];
    let results = outcome.set_failures_aside(results, |s| s.starts_with("job"));
    assert!(!outcome.tally(3, results, kind));
    assert_eq!((outcome.attempted, outcome.skipped), (2, 1));
    assert_eq!(outcome.set_aside, vec![E::One("quota")]);
    assert!(outcome.failures.is_empty());
    assert_eq!(outcome.into_error(), None);

    // Other failures stay failures.
    let mut outcome = Outcome::default();
    let results = vec![("update a", Err(E::One("x")))];
    let results = outcome.set_failures_aside(results, |s| s.starts_with("job"));
    assert!(outcome.tally(1, results, kind));
    assert!(outcome.set_aside.is_empty());
    assert_eq!(outcome.into_error(), Some(E::One("x")));
}
