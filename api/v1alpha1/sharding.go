package v1alpha1

// ShardLabel on a GuardedJob names the shard (the manager Deployment) that runs it:
// a manager started with --watch-label-selector=sharding.guardedjob.dev/key=NAME
// serves the GuardedJobs labelled NAME, and the default shard
// (!sharding.guardedjob.dev/key) those without the label. The manager copies it onto
// the Jobs it creates, so that the shard that created a Job is the one that stops it
// if its GuardedJob vanishes.
const ShardLabel = "sharding.guardedjob.dev/key"
