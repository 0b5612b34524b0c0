//! The verdict of each check, from the exchanges it recorded: pure functions, no
//! network, so every rule is unit-tested over recorded answers.

use std::fmt;

/// One answer as the probe received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exchange {
    pub(crate) status: u16,
    /// Names lowercase.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// What one request got: an answer, or why there was none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Answered(Exchange),
    /// No answer (connection refused, timeout, broken response).
    NoAnswer(String),
}

impl Exchange {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The same status and body bytes: what a replay must give.
    fn same_answer(&self, other: &Exchange) -> bool {
        self.status == other.status && self.body == other.body
    }

    fn marked_replayed(&self) -> bool {
        self.header("idempotent-replayed")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    fn is_problem_json(&self) -> bool {
        self.header("content-type").is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/problem+json"))
        })
    }

    /// The problem type's last segment, when the body is problem+json with a type.
    fn problem_name(&self) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let kind = value.get("type")?.as_str()?;
        Some(kind.rsplit('/').next().unwrap_or(kind).to_owned())
    }
}

/// `201, application/json, 57 bytes: {"id":"appt_1",...}` — what a detail quotes.
impl fmt::Display for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.status)?;
        if let Some(problem) = self.problem_name().filter(|_| self.is_problem_json()) {
            return write!(f, " {problem}");
        }
        if let Some(kind) = self.header("content-type") {
            write!(f, ", {kind}")?;
        }
        write!(f, ", {} bytes", self.body.len())?;
        if !self.body.is_empty() {
            let text = String::from_utf8_lossy(&self.body);
            let excerpt: String = text.chars().take(60).collect();
            let more = if text.chars().count() > 60 { "…" } else { "" };
            write!(f, ": {}{more}", excerpt.replace(['\r', '\n'], " "))?;
        }
        Ok(())
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Answered(e) => e.fmt(f),
            Outcome::NoAnswer(why) => write!(f, "no answer ({why})"),
        }
    }
}

/// A check's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pass,
    Fail,
    Warn,
    Skip,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Warn => "warn",
            Verdict::Skip => "skip",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Check {
    pub(crate) id: &'static str,
    pub(crate) result: Verdict,
    pub(crate) detail: String,
}

fn check(id: &'static str, result: Verdict, detail: impl Into<String>) -> Check {
    Check {
        id,
        result,
        detail: detail.into(),
    }
}

/// The first request of the replay check, when it succeeded: the answer every
/// later check compares with.
pub(crate) fn accepted(first: &Outcome) -> Option<&Exchange> {
    match first {
        Outcome::Answered(e) if e.is_success() => Some(e),
        _ => None,
    }
}

/// `key-required`: the request without a key is refused with 4xx.
pub(crate) fn key_required(without_key: &Outcome) -> Check {
    const ID: &str = "key-required";
    match without_key {
        Outcome::Answered(e) if (400..500).contains(&e.status) => {
            check(ID, Verdict::Pass, format!("refused without a key: {e}"))
        }
        Outcome::Answered(e) if e.is_success() => check(
            ID,
            Verdict::Warn,
            format!("executed without a key ({e}): the key is optional here"),
        ),
        other => check(
            ID,
            Verdict::Fail,
            format!("expected a 4xx refusal without a key, got {other}"),
        ),
    }
}

/// `key-too-long`: a 256-character key is refused with 400.
pub(crate) fn key_too_long(answer: &Outcome) -> Check {
    const ID: &str = "key-too-long";
    match answer {
        Outcome::Answered(e) if e.status == 400 => {
            check(ID, Verdict::Pass, format!("256-character key refused: {e}"))
        }
        Outcome::Answered(e) if (400..500).contains(&e.status) => check(
            ID,
            Verdict::Warn,
            format!("256-character key refused, but not with 400: {e}"),
        ),
        other => check(
            ID,
            Verdict::Fail,
            format!("expected 400 for a 256-character key, got {other}"),
        ),
    }
}

/// `replay`: the same key again gets the same status and body.
pub(crate) fn replay(first: &Outcome, again: &Outcome) -> Check {
    const ID: &str = "replay";
    let Some(first) = accepted(first) else {
        return check(
            ID,
            Verdict::Fail,
            format!(
                "the first request got {first}: the probe needs a request the API accepts \
                 (set -X, -H and -d)"
            ),
        );
    };
    match again {
        Outcome::Answered(e) if e.same_answer(first) => check(
            ID,
            Verdict::Pass,
            format!("the retry got the first answer again: {e}"),
        ),
        Outcome::Answered(e) if e.is_success() => check(
            ID,
            Verdict::Fail,
            format!("the retry got another answer ({e}; first: {first}): it ran again"),
        ),
        other => check(
            ID,
            Verdict::Fail,
            format!("the retry got {other}; the first request got {first}"),
        ),
    }
}

/// `replay-marker`: the replay says so with `Idempotent-Replayed: true`.
pub(crate) fn replay_marker(replayed: &Check, again: &Outcome) -> Check {
    const ID: &str = "replay-marker";
    if replayed.result != Verdict::Pass {
        return check(ID, Verdict::Skip, "needs a passing replay");
    }
    match again {
        Outcome::Answered(e) if e.marked_replayed() => {
            check(ID, Verdict::Pass, "Idempotent-Replayed: true")
        }
        _ => check(
            ID,
            Verdict::Warn,
            "the replay carries no Idempotent-Replayed: true header",
        ),
    }
}

/// `equivalent-body`: the same JSON value, respelled, replays.
pub(crate) fn equivalent_body(first: &Outcome, respelled: Option<&Outcome>) -> Check {
    const ID: &str = "equivalent-body";
    let Some(first) = accepted(first) else {
        return check(ID, Verdict::Skip, "needs a successful first request");
    };
    let Some(respelled) = respelled else {
        return check(ID, Verdict::Skip, "the body is not JSON");
    };
    match respelled {
        Outcome::Answered(e) if e.same_answer(first) => check(
            ID,
            Verdict::Pass,
            format!("member order and whitespace changed, the first answer replayed: {e}"),
        ),
        Outcome::Answered(e) if e.status == 422 || e.status == 409 => check(
            ID,
            Verdict::Warn,
            format!(
                "the same JSON value respelled was refused ({e}): the server compares bytes, \
                 not JSON values"
            ),
        ),
        Outcome::Answered(e) if e.is_success() => check(
            ID,
            Verdict::Fail,
            format!("the same JSON value respelled ran again ({e}; first: {first})"),
        ),
        other => check(
            ID,
            Verdict::Fail,
            format!("the same JSON value respelled got {other}"),
        ),
    }
}

/// What the mismatch check sent: the varied field, and the two answers.
pub(crate) struct MismatchRun<'a> {
    pub(crate) pointer: &'a str,
    /// The same key with the varied body.
    pub(crate) varied: &'a Outcome,
    /// The same key with the original body, afterwards.
    pub(crate) original_again: &'a Outcome,
}

/// `mismatch`: the same key with a changed field is refused with 422 or 409, and
/// the original request still replays afterwards.
pub(crate) fn mismatch(first: &Outcome, run: Option<&MismatchRun<'_>>) -> Check {
    const ID: &str = "mismatch";
    let Some(first) = accepted(first) else {
        return check(ID, Verdict::Skip, "needs a successful first request");
    };
    let Some(run) = run else {
        return check(
            ID,
            Verdict::Skip,
            "no string or number field to vary: pass --vary POINTER",
        );
    };
    let pointer = run.pointer;
    let varied = match run.varied {
        Outcome::Answered(e) => e,
        other => {
            return check(
                ID,
                Verdict::Fail,
                format!("the same key with {pointer} changed got {other}"),
            );
        }
    };
    if varied.same_answer(first) {
        return check(
            ID,
            Verdict::Fail,
            format!(
                "the same key with {pointer} changed got the first request's answer ({varied}): \
                 the changed request silently never happened"
            ),
        );
    }
    if varied.is_success() {
        return check(
            ID,
            Verdict::Fail,
            format!("the same key with {pointer} changed ran ({varied})"),
        );
    }
    if varied.status != 422 && varied.status != 409 {
        return check(
            ID,
            Verdict::Fail,
            format!("the same key with {pointer} changed got {varied}; expected 422 or 409"),
        );
    }
    match run.original_again {
        Outcome::Answered(e) if e.same_answer(first) => check(
            ID,
            Verdict::Pass,
            format!(
                "the same key with {pointer} changed was refused ({varied}); the original still \
                 replays"
            ),
        ),
        other => check(
            ID,
            Verdict::Fail,
            format!(
                "the changed request was refused ({varied}), but the original then got {other} \
                 instead of its first answer: overwritten?"
            ),
        ),
    }
}

/// `concurrent`: simultaneous requests with one fresh key give at most one
/// distinct successful answer; the others are 409 or that identical answer.
pub(crate) fn concurrent(answers: &[Outcome]) -> Check {
    const ID: &str = "concurrent";
    let n = answers.len();
    let mut successes: Vec<&Exchange> = Vec::new();
    let mut in_progress = 0;
    let mut without_retry_after = 0;
    let mut others: Vec<String> = Vec::new();
    for answer in answers {
        match answer {
            Outcome::Answered(e) if e.is_success() => successes.push(e),
            Outcome::Answered(e) if e.status == 409 => {
                in_progress += 1;
                if e.header("retry-after").is_none() {
                    without_retry_after += 1;
                }
            }
            other => others.push(other.to_string()),
        }
    }
    let mut distinct: Vec<&Exchange> = Vec::new();
    for s in &successes {
        if !distinct.iter().any(|d| d.same_answer(s)) {
            distinct.push(s);
        }
    }
    if let [a, b, ..] = distinct.as_slice() {
        return check(
            ID,
            Verdict::Fail,
            format!(
                "{n} simultaneous requests with one key got {} different successful answers \
                 ({a} / {b}): it ran more than once",
                distinct.len()
            ),
        );
    }
    if !others.is_empty() {
        return check(
            ID,
            Verdict::Fail,
            format!(
                "{} of {n} simultaneous requests got neither the answer nor 409: {}",
                others.len(),
                others.first().map_or("", String::as_str)
            ),
        );
    }
    let Some(answer) = distinct.first() else {
        return check(
            ID,
            Verdict::Fail,
            format!("none of {n} simultaneous requests succeeded ({in_progress} × 409)"),
        );
    };
    let summary = format!(
        "{n} simultaneous requests, one answer ({answer}): {} × that answer, {in_progress} × 409",
        successes.len()
    );
    if without_retry_after > 0 {
        return check(
            ID,
            Verdict::Warn,
            format!("{summary}; {without_retry_after} of the 409s carry no Retry-After"),
        );
    }
    check(ID, Verdict::Pass, summary)
}

/// What the tenant-isolation check sent under the other principal's credentials.
pub(crate) struct IsolationRun<'a> {
    /// A fresh key (what the other principal gets for this request on its own).
    pub(crate) control: &'a Outcome,
    /// The first principal's key.
    pub(crate) same_key: &'a Outcome,
}

/// `tenant-isolation`: the same key from another principal never receives the
/// first principal's answer.
pub(crate) fn tenant_isolation(first: &Outcome, run: Option<&IsolationRun<'_>>) -> Check {
    const ID: &str = "tenant-isolation";
    let Some(run) = run else {
        return check(
            ID,
            Verdict::Skip,
            "pass --other-tenant-header with a second principal's credentials",
        );
    };
    let Some(first) = accepted(first) else {
        return check(ID, Verdict::Skip, "needs a successful first request");
    };
    let answer = match run.same_key {
        Outcome::Answered(e) => e,
        other => {
            return check(
                ID,
                Verdict::Fail,
                format!("the other principal's request got {other}"),
            );
        }
    };
    let indistinguishable = matches!(run.control, Outcome::Answered(c) if c.same_answer(first));
    if answer.same_answer(first) || (answer.marked_replayed() && answer.body == first.body) {
        if indistinguishable && !answer.marked_replayed() {
            return check(
                ID,
                Verdict::Warn,
                format!(
                    "cannot tell: the other principal gets the same answer with a fresh key too \
                     ({answer})"
                ),
            );
        }
        return check(
            ID,
            Verdict::Fail,
            format!(
                "the other principal, sending the same key, received the first principal's \
                 answer: {answer}"
            ),
        );
    }
    match answer.status {
        401 | 403 => check(
            ID,
            Verdict::Warn,
            format!("the other principal's credentials were refused ({answer}): nothing checked"),
        ),
        409 | 422 => check(
            ID,
            Verdict::Warn,
            format!(
                "no answer leaked, but keys are shared across principals: the other principal's \
                 request was refused as a reuse ({answer})"
            ),
        ),
        _ => check(
            ID,
            Verdict::Pass,
            format!("the other principal's request with the same key ran on its own: {answer}"),
        ),
    }
}

/// `problem-json`: refusals (4xx) use `application/problem+json`.
pub(crate) fn problem_json<'a>(answers: impl IntoIterator<Item = &'a Outcome>) -> Check {
    const ID: &str = "problem-json";
    let refusals: Vec<&Exchange> = answers
        .into_iter()
        .filter_map(|o| match o {
            Outcome::Answered(e) if (400..500).contains(&e.status) => Some(e),
            _ => None,
        })
        .collect();
    if refusals.is_empty() {
        return check(ID, Verdict::Skip, "no refusal seen");
    }
    let plain: Vec<&&Exchange> = refusals.iter().filter(|e| !e.is_problem_json()).collect();
    match plain.first() {
        None => check(
            ID,
            Verdict::Pass,
            format!("{} refusals, all application/problem+json", refusals.len()),
        ),
        Some(e) => check(
            ID,
            Verdict::Warn,
            format!(
                "{} of {} refusals are not application/problem+json, e.g. {e}",
                plain.len(),
                refusals.len()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str, headers: &[(&str, &str)]) -> Outcome {
        Outcome::Answered(Exchange {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.as_bytes().to_vec(),
        })
    }

    fn created(id: &str) -> Outcome {
        answer(
            201,
            &format!(r#"{{"id":"{id}"}}"#),
            &[("content-type", "application/json")],
        )
    }

    fn replayed(id: &str) -> Outcome {
        answer(
            201,
            &format!(r#"{{"id":"{id}"}}"#),
            &[
                ("content-type", "application/json"),
                ("idempotent-replayed", "true"),
            ],
        )
    }

    fn problem(status: u16, name: &str, extra: &[(&str, &str)]) -> Outcome {
        let mut headers = vec![("content-type", "application/problem+json")];
        headers.extend_from_slice(extra);
        answer(
            status,
            &format!(r#"{{"type":"https://idemkit.dev/problems/{name}","status":{status}}}"#),
            &headers,
        )
    }

    fn gone() -> Outcome {
        Outcome::NoAnswer("connection refused".into())
    }

    #[test]
    fn key_required_passes_on_4xx_warns_on_execution_fails_otherwise() {
        let pass = key_required(&problem(400, "missing-idempotency-key", &[]));
        assert_eq!(pass.result, Verdict::Pass);
        assert!(
            pass.detail.contains("missing-idempotency-key"),
            "{}",
            pass.detail
        );
        assert_eq!(key_required(&created("a")).result, Verdict::Warn);
        assert_eq!(
            key_required(&answer(500, "boom", &[])).result,
            Verdict::Fail
        );
        assert_eq!(key_required(&gone()).result, Verdict::Fail);
    }

    #[test]
    fn key_too_long_wants_400() {
        assert_eq!(
            key_too_long(&problem(400, "invalid-idempotency-key", &[])).result,
            Verdict::Pass
        );
        assert_eq!(key_too_long(&answer(422, "", &[])).result, Verdict::Warn);
        assert_eq!(key_too_long(&created("a")).result, Verdict::Fail);
    }

    #[test]
    fn replay_wants_the_identical_answer() {
        assert_eq!(replay(&created("a"), &replayed("a")).result, Verdict::Pass);
        let again = replay(&created("a"), &created("b"));
        assert_eq!(again.result, Verdict::Fail);
        assert!(again.detail.contains("ran again"), "{}", again.detail);
        assert_eq!(
            replay(&created("a"), &problem(409, "request-in-progress", &[])).result,
            Verdict::Fail
        );
        let refused_first = replay(&answer(401, "no", &[]), &answer(401, "no", &[]));
        assert_eq!(refused_first.result, Verdict::Fail);
        assert!(
            refused_first.detail.contains("-H"),
            "{}",
            refused_first.detail
        );
    }

    #[test]
    fn replay_marker_warns_without_the_header_and_skips_without_a_replay() {
        let ok = replay(&created("a"), &replayed("a"));
        assert_eq!(replay_marker(&ok, &replayed("a")).result, Verdict::Pass);
        assert_eq!(replay_marker(&ok, &created("a")).result, Verdict::Warn);
        let failed = replay(&created("a"), &created("b"));
        assert_eq!(replay_marker(&failed, &created("b")).result, Verdict::Skip);
    }

    #[test]
    fn equivalent_body_replays_warns_on_byte_comparison_fails_on_a_second_run() {
        let first = created("a");
        assert_eq!(
            equivalent_body(&first, Some(&replayed("a"))).result,
            Verdict::Pass
        );
        assert_eq!(
            equivalent_body(&first, Some(&problem(422, "idempotency-key-reused", &[]))).result,
            Verdict::Warn
        );
        assert_eq!(
            equivalent_body(&first, Some(&created("b"))).result,
            Verdict::Fail
        );
        assert_eq!(equivalent_body(&first, None).result, Verdict::Skip);
    }

    #[test]
    fn mismatch_passes_only_on_a_refusal_that_leaves_the_original_replaying() {
        let first = created("a");
        let refused = problem(422, "idempotency-key-reused", &[]);
        let run = |varied: &Outcome, again: &Outcome| {
            mismatch(
                &first,
                Some(&MismatchRun {
                    pointer: "/amount",
                    varied,
                    original_again: again,
                }),
            )
        };
        assert_eq!(run(&refused, &replayed("a")).result, Verdict::Pass);
        assert_eq!(
            run(&problem(409, "conflict", &[]), &replayed("a")).result,
            Verdict::Pass
        );
        // The changed request answered with the first one's result: a silent loss.
        let silent = run(&replayed("a"), &replayed("a"));
        assert_eq!(silent.result, Verdict::Fail);
        assert!(silent.detail.contains("silently"), "{}", silent.detail);
        // Executed under the same key.
        assert_eq!(run(&created("b"), &replayed("a")).result, Verdict::Fail);
        // Refused, but the first outcome was overwritten.
        let overwritten = run(&refused, &created("b"));
        assert_eq!(overwritten.result, Verdict::Fail);
        assert!(
            overwritten.detail.contains("overwritten"),
            "{}",
            overwritten.detail
        );
        assert_eq!(
            run(&answer(400, "bad", &[]), &replayed("a")).result,
            Verdict::Fail
        );
        assert_eq!(mismatch(&first, None).result, Verdict::Skip);
    }

    #[test]
    fn concurrent_allows_one_answer_and_409s() {
        let retry = [("retry-after", "1")];
        let mut answers = vec![created("a"), replayed("a")];
        answers.extend((0..18).map(|_| problem(409, "request-in-progress", &retry)));
        let ok = concurrent(&answers);
        assert_eq!(ok.result, Verdict::Pass, "{}", ok.detail);
        assert!(ok.detail.contains("18 × 409"), "{}", ok.detail);
        // Check-then-act: every request ran.
        let raced: Vec<Outcome> = (0..20).map(|i| created(&format!("p{i}"))).collect();
        let fail = concurrent(&raced);
        assert_eq!(fail.result, Verdict::Fail);
        assert!(fail.detail.contains("20 different"), "{}", fail.detail);
        // 409 without Retry-After.
        let bare = vec![created("a"), problem(409, "request-in-progress", &[])];
        assert_eq!(concurrent(&bare).result, Verdict::Warn);
        // A 500 among them, or no success at all.
        let broken = vec![created("a"), answer(500, "boom", &[])];
        assert_eq!(concurrent(&broken).result, Verdict::Fail);
        let none = vec![problem(409, "request-in-progress", &retry); 3];
        assert_eq!(concurrent(&none).result, Verdict::Fail);
        assert_eq!(concurrent(&[created("a"), gone()]).result, Verdict::Fail);
    }

    #[test]
    fn tenant_isolation_fails_when_the_other_principal_gets_the_first_answer() {
        let first = created("a");
        let run = |control: Outcome, same_key: Outcome| {
            tenant_isolation(
                &first,
                Some(&IsolationRun {
                    control: &control,
                    same_key: &same_key,
                }),
            )
        };
        assert_eq!(run(created("b"), created("c")).result, Verdict::Pass);
        let leaked = run(created("b"), replayed("a"));
        assert_eq!(leaked.result, Verdict::Fail);
        assert!(
            leaked.detail.contains("first principal"),
            "{}",
            leaked.detail
        );
        assert_eq!(run(created("b"), created("a")).result, Verdict::Fail);
        // Answers that carry nothing distinguishing cannot tell.
        assert_eq!(run(created("a"), created("a")).result, Verdict::Warn);
        assert_eq!(
            run(created("b"), problem(422, "idempotency-key-reused", &[])).result,
            Verdict::Warn
        );
        assert_eq!(
            run(created("b"), answer(401, "", &[])).result,
            Verdict::Warn
        );
        assert_eq!(run(created("b"), gone()).result, Verdict::Fail);
        assert_eq!(tenant_isolation(&first, None).result, Verdict::Skip);
    }

    #[test]
    fn problem_json_looks_at_every_refusal() {
        let p = problem(400, "missing-idempotency-key", &[]);
        let plain = answer(422, "nope", &[("content-type", "text/plain")]);
        assert_eq!(problem_json([&p, &created("a")]).result, Verdict::Pass);
        let mixed = problem_json([&p, &plain]);
        assert_eq!(mixed.result, Verdict::Warn);
        assert!(mixed.detail.contains("1 of 2"), "{}", mixed.detail);
        assert_eq!(problem_json([&created("a")]).result, Verdict::Skip);
    }

    #[test]
    fn details_quote_what_the_server_answered() {
        let text = created("appt_1").to_string();
        assert_eq!(text, r#"201, application/json, 15 bytes: {"id":"appt_1"}"#);
        let p = problem(409, "request-in-progress", &[]).to_string();
        assert_eq!(p, "409 request-in-progress");
        assert_eq!(gone().to_string(), "no answer (connection refused)");
    }
}
