/* placeholder, replaced in this change */ typedef int sq_placeholder_transport_mpi;
