// Package deploy holds no Go code: it is where the files that run potato-k3 dataset jobs on an existing
// scheduler live, next to the tests that run them.
//
//   - slurm/potato-array.sbatch: a Slurm job array, one shard of the dataset a task on a GPU node, the
//     checkpoint staged to local NVMe, results on shared storage; slurm/testcluster.sh starts a single-node
//     Slurm cluster from Debian's packages to test it (TestSlurmArray, with POTATO_SLURM_TEST=1).
//   - k8s/potato-indexed-job.yaml: a Kubernetes Indexed Job, the completion index as the shard
//     (TestKubernetesManifest checks its shape and runs its pod's commands); k8s/potato-merge-job.yaml
//     merges the shards once it is complete (TestKubernetesMergeJob).
//
// README.md ("Large datasets") and deploy/README.md say how to use them.
package deploy
