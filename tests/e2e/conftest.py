import warnings

warnings.filterwarnings("ignore", category=FutureWarning)
