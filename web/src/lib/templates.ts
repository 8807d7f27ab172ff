// What the submit page starts from for a new run or sweep: the smallest manifests that
// run as they are (the reference training workload on a tiny model, on the CPU), for the
// user to edit. The sweep has examples/sweep.yaml's shape, less its dataset input, which a
// project may not have.

export function runTemplate(name: string): string {
  return `apiVersion: crucible.dev/v1alpha1
kind: TrainingRun
metadata:
  name: ${name}
spec:
  experiment: default
  config:
    model:
      preset: tiny
    train:
      steps: 100
      lr: 0.001
`;
}

export function sweepTemplate(name: string): string {
  return `apiVersion: crucible.dev/v1alpha1
kind: Sweep
metadata:
  name: ${name}
spec:
  method: grid
  metric: {name: loss, goal: minimize}
  budget: {trials: 3, concurrency: 1}
  parameters:
    config.train.lr: {values: [0.003, 0.0003, 0.00003]}
  run:
    experiment: sweeps
    config:
      model:
        preset: tiny
      train:
        steps: 100
`;
}
