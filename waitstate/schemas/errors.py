"""ApplicationError type names, in one place (workflows, activities and the CLI match on them)."""

# A model provider refused the request (4xx other than 408/409/429): retrying cannot help.
MODEL_REQUEST_REJECTED = "ModelRequestRejected"
# A provider answered 408/409/429/5xx or could not be reached: Temporal retries.
MODEL_UNAVAILABLE = "ModelUnavailable"
# The model spec names no known provider, or the provider is not configured.
MODEL_SPEC_INVALID = "ModelSpecInvalid"
# A model the run may go on with later (its budget's `degrade_to`) is one this worker cannot
# call: checked with each call before it, so the run fails at once, not when it switches.
LATER_MODEL_INVALID = "LaterModelInvalid"
# A background response ended without an answer (failed, or cancelled at the provider):
# asking for it again changes nothing.
MODEL_RESPONSE_FAILED = "ModelResponseFailed"
# The run's input is inconsistent (e.g. a tool name that is not registered).
RUN_INPUT_INVALID = "RunInputInvalid"
# The run ended in failure (its model could not be called); the message says why.
RUN_FAILED = "RunFailed"
# The blob store could not be read or written (an outage: read-only, full, unreachable). The
# name of `waitstate.blobs.BlobStoreUnavailable`, which an activity that lets it through is
# failed with; runs wait it out instead of spending a call's retries on it.
BLOB_STORE_UNAVAILABLE = "BlobStoreUnavailable"

# Completions refused by the run's Update validator (nothing is written to history).
OPERATION_UNKNOWN = "OperationUnknown"  # no such operation in this run -> HTTP 404
OPERATION_NONCE_MISMATCH = "OperationNonceMismatch"  # token not issued for it -> HTTP 401
OPERATION_RESOLVED = "OperationResolved"  # it already ended (any terminal status) -> HTTP 409
# A progress report the operation already shows (a copy of one delivery): nothing to change.
OPERATION_UNCHANGED = "OperationUnchanged"  # -> HTTP 409 duplicate_report
# A check of the operation's job asked for that the run will not make: one is asked already, it
# was asked too often, or the run checks that job only before its expiry.
OPERATION_NOT_CHECKED = "OperationNotChecked"  # -> HTTP 409 check_refused
# A poll found the job still running: the retry policy is the poller for long intervals.
OPERATION_STILL_RUNNING = "OperationStillRunning"
# The job's system refused to cancel it (the job may still run): not retried.
CANCEL_REFUSED = "CancelRefused"

# Decisions refused by the `decide` Update's validator.
APPROVAL_UNKNOWN = "ApprovalUnknown"  # no such request in this run -> HTTP 404
APPROVAL_NONCE_MISMATCH = "ApprovalNonceMismatch"  # link token not issued for it -> HTTP 401
APPROVAL_DECIDED = "ApprovalDecided"  # already decided or expired -> HTTP 409

# Answers refused by the `answer` Update's validator.
QUESTION_UNKNOWN = "QuestionUnknown"  # no such question in this run -> HTTP 404
QUESTION_NONCE_MISMATCH = "QuestionNonceMismatch"  # link token not issued for it -> HTTP 401
QUESTION_CLOSED = "QuestionClosed"  # already answered, declined, expired -> HTTP 409
QUESTION_NOT_YOURS = "QuestionNotYours"  # the tool's policy names the model -> HTTP 403
QUESTION_INVALID_ANSWER = "QuestionInvalidAnswer"  # not valid for its schema -> HTTP 422
# An answer the job's system would not take (the delivery activity's failure).
ANSWER_REFUSED = "AnswerRefused"

# The blob cleanup was given no retention and the namespace reports none to default to.
RETENTION_UNKNOWN = "RetentionUnknown"

# An A2A push's receiver refused it (a 4xx), or the worker cannot send pushes: not retried.
PUSH_REFUSED = "PushRefused"
# A run refused a change of its A2A push configurations (too many, or it is a thread).
PUSH_CONFIG_REFUSED = "PushConfigRefused"
