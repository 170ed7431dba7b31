/* placeholder, replaced in this change */ typedef int sq_placeholder_stats;
