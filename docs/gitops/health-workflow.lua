-- Argo CD health of a towline.dev Workflow: its Ready condition, for the generation it describes.
local hs = {status = "Progressing", message = "Waiting for the Towline operator to validate the workflow"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation or 0
if obj.status.observedGeneration ~= nil and obj.status.observedGeneration < generation then
  return hs
end
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then
    if condition.status == "True" then
      if obj.spec ~= nil and obj.spec.suspend == true then
        return {status = "Suspended", message = "Valid; schedules are suspended (spec.suspend)"}
      end
      return {status = "Healthy", message = condition.message or "Valid"}
    elseif condition.status == "False" then
      return {status = "Degraded", message = condition.message or condition.reason or "Invalid"}
    end
  end
end
return hs
