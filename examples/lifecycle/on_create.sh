#!/bin/bash
# Runs once on every new node, as HyperPod's lifecycle scripts do. hyperscope sets:
#   HYPERSCOPE_CLUSTER, HYPERSCOPE_GROUP, HYPERSCOPE_ROLE (controller|login|worker), HYPERSCOPE_NODE,
#   HYPERSCOPE_CONTROLLER, HYPERSCOPE_SHARED_DIR, HYPERSCOPE_RESOURCE_CONFIG (a JSON file of the
#   whole cluster: groups and their nodes) and SLURM_CONF.
# A non-zero exit marks the node and the cluster Failed with this script's output.
set -euo pipefail
echo "on_create: $HYPERSCOPE_NODE ($HYPERSCOPE_ROLE of group $HYPERSCOPE_GROUP) in $HYPERSCOPE_CLUSTER"
# checkpoints, and hyperscope's store (jobs catalog + profiles; `hyperscope submit` points jobs at it)
mkdir -p "$HYPERSCOPE_SHARED_DIR/checkpoints" "$HYPERSCOPE_SHARED_DIR/hyperscope"
case "$HYPERSCOPE_ROLE" in
  controller) echo "controller: slurm.conf is $SLURM_CONF" ;;
  login)      echo "login: users submit from here with SLURM_CONF=$SLURM_CONF" ;;
  worker)     echo "worker: ready" ;;
esac
