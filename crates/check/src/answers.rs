//! Every request answered exactly once: none lost, none duplicated.

use crate::envelope::MAX_WITNESS_IDS;
use crate::history::RequestRecord;

/// Requests without an answer, and answers beyond the first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnswerReport {
    /// Requests never answered.
    pub unanswered: u64,
    /// Extra answers.
    pub duplicated: u64,
    /// The first few unanswered ids.
    pub unanswered_ids: Vec<u64>,
}

/// Runs the answered-exactly-once checker.
pub fn answered_once(requests: &[RequestRecord]) -> AnswerReport {
    let mut r = AnswerReport::default();
    for q in requests {
        if q.answer.is_none() {
            r.unanswered += 1;
            if r.unanswered_ids.len() < MAX_WITNESS_IDS {
                r.unanswered_ids.push(q.id);
            }
        }
        r.duplicated += u64::from(q.extra_answers);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Answer;
    use crate::testing::record;
    use ratelab_core::Nanos;

    const OK: Answer = Answer::Allowed {
        decided_at: Nanos(0),
        remaining: 0,
    };

    #[test]
    fn answered_once_catches_lost_and_duplicated_answers() {
        let r = answered_once(&[
            record(0, Some(OK), 0),
            record(1, None, 0),
            record(2, Some(OK), 2),
        ]);
        assert_eq!((r.unanswered, r.duplicated), (1, 2));
        assert_eq!(r.unanswered_ids, vec![1]);
        assert_eq!(
            answered_once(&[record(0, Some(OK), 0)]),
            AnswerReport::default()
        );
    }
}
