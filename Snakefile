# Regenerate a paper's table:   snakemake --cores 8 papers/fedssd/table2
# At a small scale on a CPU:    snakemake --cores 2 --config scale=smoke -- papers/fedssd/table2
# On SLURM:                     snakemake --profile profiles/slurm papers/fedssd/table2
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/tables.smk"
include: "papers/fedcad/rules.smk"
include: "papers/fedssd/rules.smk"
include: "papers/fedcsd/rules.smk"
include: "papers/fedgkd/rules.smk"
