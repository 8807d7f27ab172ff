"""Condition types and reasons, shared by the control plane, the operator and the workers.

Kept in one module so a reason string is never spelled two ways (as in jobset/kueue).
"""

# Condition types
CONDITION_READY = "Ready"
CONDITION_SCHEDULED = "Scheduled"
CONDITION_INPUTS_READY = "InputsReady"
CONDITION_SUCCEEDED = "Succeeded"

# Reasons a run or attempt ended or is waiting
REASON_COMPLETED = "Completed"
REASON_CANCELLED_BY_USER = "CancelledByUser"
REASON_STOPPED_BY_SWEEP = "StoppedBySweep"  # early stopping (ASHA) judged the trial
REASON_PREEMPTED = "Preempted"
REASON_EVICTED = "Evicted"
REASON_NODE_LOST = "NodeLost"
REASON_HEARTBEAT_TIMEOUT = "HeartbeatTimeout"
REASON_OOM_KILLED = "OOMKilled"
REASON_ERROR_EXIT = "ErrorExit"
REASON_IMAGE_PULL_FAILED = "ImagePullFailed"  # the node could not get the pod's image
REASON_STORAGE_UNAVAILABLE = "StorageUnavailable"  # checkpoint storage did not answer
REASON_REACHED_MAX_INTERRUPTIONS = "ReachedMaxInterruptions"
REASON_REACHED_MAX_FAILURES = "ReachedMaxFailures"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_INPUTS_MISSING = "InputsMissing"
REASON_PRODUCER_FAILED = "ProducerFailed"
# initFrom names a checkpoint id that no run of the project wrote (or none at all)
REASON_CHECKPOINT_NOT_IN_PROJECT = "CheckpointNotInProject"
REASON_ARTIFACT_NOT_IN_PROJECT = "ArtifactNotInProject"  # config names `artifact:<id>` of none
REASON_NOT_A_CODE_PACKAGE = "NotACodePackage"  # codePackage names an artifact of another kind
REASON_CHECKPOINT_DELETED = "CheckpointDeleted"  # initFrom names one retention removed
REASON_SUBMITTED = "Submitted"
REASON_INVALID_SPEC = "InvalidSpec"
REASON_RESOURCE_DELETED = "ResourceDeleted"  # its custom resource vanished past the operator

# Event types other components act on
EVENT_PREEMPT_REQUESTED = "PreemptRequested"  # the executor/operator drains the run
EVENT_CHECKPOINT_REGISTERED = "CheckpointRegistered"  # the operator shows it in the status
# Told apart by the operator's event follower (feed.py): which ones its loop already knows
EVENT_PHASE_CHANGED = "PhaseChanged"
EVENT_ATTEMPT_STARTED = "AttemptStarted"
EVENT_EVAL_RESULT_RECORDED = "EvalResultRecorded"
# The rest of a run's timeline (shown in the CLI and the dashboard; nothing acts on them)
EVENT_SUBMITTED = "Submitted"
EVENT_ATTEMPT_ENDED = "AttemptEnded"
EVENT_RECOVERY_SCHEDULED = "RecoveryScheduled"
EVENT_RECOVERY_WAITING = "RecoveryWaiting"  # recovery waits for the checkpoint storage to answer
EVENT_CHECKPOINT_DAMAGED = "CheckpointDamaged"
EVENT_CHECKPOINT_VERIFIED = "CheckpointVerified"  # the digest of the one recovery chose matched
EVENT_CHECKPOINT_RETIRED = "CheckpointRetired"
EVENT_DATASET_VERSION_REGISTERED = "DatasetVersionRegistered"
# On the promoted checkpoint's run: who asked which deployment to serve it
EVENT_CHECKPOINT_PROMOTED = "CheckpointPromoted"
