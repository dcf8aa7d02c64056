#!/bin/sh
# py_rank_env.sh COMMAND... - runs COMMAND with WEFT_RANK/WEFT_SIZE taken
# from the MPI launcher's variables, for test files written for weftrun
# that compare weft's rank with WEFT_RANK (weft itself still bootstraps from
# MPI: without WEFT_ADDR the variables only have to agree with MPI's).
WEFT_RANK=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-}}}
WEFT_SIZE=${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-}}
export WEFT_RANK WEFT_SIZE
exec "$@"
